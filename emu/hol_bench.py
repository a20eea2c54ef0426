"""Command alias: `python -m emu.hol_bench` (the name issues 7, 9 and 16 spell out) runs `sw.apps.hol_bench`.

Only a launcher for that command contract: importing it does nothing and nothing imports it, so no library code in
`emu` depends on the application layer (the bench itself lives in `sw/apps`).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("sw.apps.hol_bench", run_name="__main__", alter_sys=True)
