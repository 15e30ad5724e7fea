#!/usr/bin/env bash
# Install everything the tests need (scripts/setup.sh), then run every test layer (unit +
# integration) and the linter.
#   bash scripts/test.sh                      # all tests (what CI runs)
#   bash scripts/test.sh -m "not integration" # the fast unit layer only (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check core tests plugins benchmarks
python -m pytest "$@"
