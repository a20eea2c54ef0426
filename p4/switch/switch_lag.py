"""The switch's lag accounting (``sw.clock.lag``): how late it received frames and sent queued packets.

Two components: ``ingress`` (the pipeline took a frame vs the kernel's receive timestamp in the port's ring)
and ``tm`` (a packet left its queue vs the departure its port's serialization schedule gave it).  Both are
judged against one MTU's serialization time at the switch's fastest shaped port, else at ``DEFAULT_RATE_BPS``
(the veths' rate), or against a bound the control plane sets (``lag_stats bound NS``).
Command: ``lag_stats [json|reset|bound NS]`` (a table, the mergeable dicts as JSON, zero them, set the bound).
"""

from __future__ import annotations

import json

from p4.errors import CommandError
from sw.clock.lag import DEFAULT_RATE_BPS, LagStats, mtu_serialization_ns

LAG_COMMANDS = {
    "lag_stats": "lag_stats [json|reset|bound NS]  (how late the switch serviced its events, in network ns: "
                 "ingress vs the frame's arrival, TM dequeue vs the port's schedule; p50/p99/max, share later "
                 "than the bound = one MTU at the fastest shaped port rate unless set)",
}


class SwitchLag:
    """The ``ingress`` and ``tm`` lateness of one switch, with the bound they are judged against."""

    def __init__(self) -> None:
        bound = mtu_serialization_ns(DEFAULT_RATE_BPS)
        self.ingress = LagStats(bound)
        self.tm = LagStats(bound)
        self.bound_set = False           # the control plane chose the bound: port rates no longer change it

    def components(self) -> dict[str, LagStats]:
        return {"ingress": self.ingress, "tm": self.tm}

    def set_bound_ns(self, bound_ns: int) -> None:
        for s in self.components().values():
            s.bound_ns = bound_ns

    def follow_port_rates(self, rates_Bps: list[float]) -> None:
        """Bound = one MTU at the fastest shaped port (a port's line rate changed), unless set explicitly."""
        if not self.bound_set:
            fastest = max(rates_Bps, default=DEFAULT_RATE_BPS / 8)
            self.set_bound_ns(mtu_serialization_ns(fastest * 8))

    def execute(self, words: list[str]) -> str:
        """One ``lag_stats`` command."""
        args = words[1:]
        if not args:
            return self.table()
        if args == ["json"]:
            return json.dumps({name: s.to_dict() for name, s in self.components().items()})
        if args == ["reset"]:
            for s in self.components().values():
                s.reset()
            return ""
        if len(args) == 2 and args[0] == "bound" and args[1].isdigit() and int(args[1]) >= 1:
            self.set_bound_ns(int(args[1]))
            self.bound_set = True
            return ""
        raise CommandError(f"lag_stats {' '.join(args)!r}: usage: {LAG_COMMANDS['lag_stats']} (NS an integer >= 1)")

    def table(self) -> str:
        cols = ["events", "late", "late_share", "lag_p50_ns", "lag_p99_ns", "lag_max_ns", "bound_ns", "ok"]
        rows = [["component", *cols]]
        for name, s in self.components().items():
            summary = s.summary()
            rows.append([name, *(str(summary[c]) for c in cols)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join(" ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in
                                  enumerate(zip(r, widths, strict=True))).rstrip() for r in rows)


def parse_lag_json(text: str) -> dict[str, LagStats]:
    """``lag_stats json``'s output back into ``LagStats`` per component (ingress, tm)."""
    try:
        data = json.loads(text)
        return {name: LagStats.from_dict(d) for name, d in data.items()}
    except (ValueError, AttributeError) as exc:
        raise CommandError(f"lag_stats json: unexpected reply {text[:80]!r} ({exc})") from None
