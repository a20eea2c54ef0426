#!/usr/bin/env bash
# The main job (`make demo`): run the end-to-end demo with the bootstrapped venv.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m sw.apps.demo "$@"
