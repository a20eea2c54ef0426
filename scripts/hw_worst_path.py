"""Print the deepest register-to-register path of an RTL block, cell by cell: runs ``hw.tools.worst_path``."""

from __future__ import annotations

from hw.tools.worst_path import main

if __name__ == "__main__":
    main(prog="scripts/hw_worst_path.py")
