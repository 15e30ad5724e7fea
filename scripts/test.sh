#!/usr/bin/env bash
# Install everything the tests need (scripts/setup.sh), then the linters (ruff; import-linter for the
# layers of the core, deferred imports counted; at most 50 deferred imports of infbench's own
# modules, scripts/count_deferred_imports.py; no string lookup of stored metrics in the core,
# scripts/count_metric_lookups.py) and every test layer (mypy over the core, strict on the data
# layer, runs once, as a test in the parallel stage: tests/integration/test_layers.py), in two stages:
#   1. on both cores (pytest-xdist, -n 2, --dist loadgroup): the integration layer (real engines,
#      servers, containers), a group of tests per worker (a test file, or every test of the Ray
#      cluster; a module's fixtures are made once), the longest groups first
#      (tests/integration/conftest.py), then the unit layer, each unit test on its own, filling
#      both workers' ends; each worker pinned to a core of its own (INFBENCH_TEST_PIN_WORKERS=1,
#      tests/conftest.py): what it starts sees one CPU and sizes its threads to it, so the two
#      workers' engines never share a core (two llama.cpp processes whose spinning threads share
#      cores collapse). No test there asserts a timing: each checks a mechanism. Not here: the
#      unit tests marked `serial` and the integration tests marked `alone`;
#   2. in one process, one at a time: the unit tests marked `serial` (a shared port, file,
#      environment or process state) and the integration tests marked `alone`, whose subject
#      needs a quiet machine (they wait for quiet seconds, compare a cell with and without a
#      neighbour, or tell a slow stretch of the host from steady state).
# Each stage prints its 20 slowest tests (--durations=20, pyproject's addopts). No test asserts a
# timing ratio: the timed comparisons are benchmarks/ (docs/benchmarks.md).
#   bash scripts/test.sh                      # all tests (what CI runs)
#   bash scripts/test.sh -m "not integration" # the fast unit layer only (stages 1 and 2)
#   bash scripts/test.sh -m vllm -x           # a marker expression is ANDed into each stage; other
#                                             # arguments (paths, -x, -k, -n N) go to every stage
#   INFBENCH_TEST_WORKERS=auto bash scripts/test.sh   # stage 1's worker count (default 2; 0: no xdist)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check core tests plugins benchmarks
lint-imports
python scripts/count_deferred_imports.py --max 50   # docs/architecture.md: imports at the top
python scripts/count_metric_lookups.py --max 0     # docs/architecture.md: results are read back typed

# Split "$@" into a marker expression (-m EXPR, -mEXPR, --markexpr EXPR) and the rest.
expr=""
rest=()
workers="${INFBENCH_TEST_WORKERS:-2}"
while (($#)); do
    case "$1" in
        -m | --markexpr) expr="$2"; shift 2 ;;
        -m?*) expr="${1#-m}"; shift ;;
        --markexpr=*) expr="${1#--markexpr=}"; shift ;;
        -n | --numprocesses) workers="$2"; shift 2 ;;
        -n?*) workers="${1#-n}"; shift ;;
        --numprocesses=*) workers="${1#--numprocesses=}"; shift ;;
        *) rest+=("$1"); shift ;;
    esac
done
and_expr() { if [[ -n "$expr" ]]; then echo "($expr) and ($1)"; else echo "$1"; fi; }

# What the tests make once (the measured CPU limits, py-cpuinfo's, vLLM's and torch's answers,
# dummy GGUF files, the CPU worker image's record: tests/support/home.py session_dir) is made by
# the first stage and reused by the second, in a folder removed at the end.
if [[ -z "${INFBENCH_TEST_SESSION_DIR:-}" ]]; then
    INFBENCH_TEST_SESSION_DIR="$(mktemp -d -t infbench-tests.XXXXXX)"
    trap 'rm -rf "$INFBENCH_TEST_SESSION_DIR"' EXIT
fi
export INFBENCH_TEST_SESSION_DIR

# pytest exits 5 when a stage selects no test (e.g. -m serial leaves stage 1 empty):
# that stage is skipped; the script fails if a stage fails, or exits 5 if no stage ran a test.
status=0
ran=0
stage() {
    local rc=0
    python -m pytest "$@" ${rest[@]+"${rest[@]}"} || rc=$?
    if ((rc == 0)); then ran=1
    elif ((rc != 5)); then status=$rc
    fi
}
xdist=()
if [[ "$workers" != "0" ]]; then xdist=(-n "$workers"); fi
INFBENCH_TEST_PIN_WORKERS=1 stage -m "$(and_expr "(not integration and not serial) or (integration and not alone)")" \
    "${xdist[@]}" ${xdist[@]+--dist loadgroup --no-loadscope-reorder}
stage -m "$(and_expr "(not integration and serial) or (integration and alone)")" -p no:xdist
if ((status == 0 && ran == 0)); then exit 5; fi
exit "$status"
