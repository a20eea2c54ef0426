"""``python -m sw.collectives``: the self-check of a launched job (see ``selfcheck``)."""

import sys

from .selfcheck import main

sys.exit(main())
