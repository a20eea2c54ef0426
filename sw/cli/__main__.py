"""Allow ``python -m sw.cli``."""

import sys

from sw.cli import main

sys.exit(main())
