"""Command alias: `python -m sw.roce.incast` (the name issues 6, 7, 9 and 16 spell out) runs `sw.apps.incast_bench`.

Only a launcher for that command contract: importing it does nothing and nothing imports it, so no library code in
`sw.roce` depends on the application layer (the bench itself lives in `sw/apps`).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("sw.apps.incast_bench", run_name="__main__", alter_sys=True)
