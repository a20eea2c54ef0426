"""Operations: what a run should look like (``expected``) and which place is at fault when it does not
(``diagnose``), read from the telemetry store (``sw.units.telemetry``).  Pure analysis over recorded rows: standard
library and the leaves only, so it runs the same on a live store and on a saved one."""
