#!/usr/bin/env bash
# Install everything the tests need (scripts/setup.sh), then the linters (ruff; import-linter for the
# layers of the core, deferred imports counted; mypy over the core, strict on the data layer) and
# every test layer (unit + integration).
#   bash scripts/test.sh                      # all tests (what CI runs)
#   bash scripts/test.sh -m "not integration" # the fast unit layer only (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check core tests plugins benchmarks
lint-imports
python -m mypy
python -m pytest "$@"
