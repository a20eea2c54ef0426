"""Make ``tests/hw`` importable (``hwsim``, the stimulus helpers) in pytest and in the cocotb processes it spawns."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
