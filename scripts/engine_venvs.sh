#!/usr/bin/env bash
# Virtual environments holding the engine packages infbench drives on accelerators only
# (DeepSpeed-MII, SGLang, optimum-habana), for the signature tests
# (tests/integration/test_engine_signatures.py): their adapters' calls and command lines are
# checked there against the real packages' functions, pydantic models and argument parsers.
# Each venv is separate (their pins conflict: optimum-habana needs transformers<4.56, SGLang
# pins torch 2.14.1 and transformers 5.19) and has PyTorch's CPU build (torch==2.13.0 resolves
# to a CPU wheel on disk on these machines; elsewhere to PyPI's default build).
#
#   bash scripts/engine_venvs.sh [DIR]      # default DIR: .venvs (or $INFBENCH_ENGINE_VENVS)
#
# * mii: deepspeed-mii 0.3.3 with its dependencies (DeepSpeed builds from its sdist: no ops are
#   compiled, they are JIT-built on a GPU), plus three modules MII imports without declaring them
#   (requests in mii/backend/client.py; uvicorn and pydantic-settings in its OpenAI server).
# * sglang: sglang 0.5.23 without its dependencies (they are CUDA builds: flashinfer, sglang-kernel,
#   torch 2.14.1), plus the pure-Python packages `sglang.srt.server_args` and
#   `sglang.srt.entrypoints.openai.protocol` import (found by importing them until nothing was
#   missing). The server itself cannot start here.
# * optimum-habana: optimum-habana 1.21.2 (huggingface_hub<1.0: transformers 4.55, which it pins,
#   needs it; without the bound pip backtracks through every hub release).
# A venv is rebuilt when its pins change (a stamp file holds them). Idempotent. The three are built
# at once; each one's pip output goes to $DIR/NAME.log, printed if its build fails. pip installs with
# --no-compile: byte-compiling every module of three copies of torch and the engines' packages
# was most of the work (248 s of CPU, 132 s on 2 cores; 102 s and 53 s without it); the probes
# compile only the modules they import, once, into the venv (about 25 s more in the signature
# tests' first run).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-${INFBENCH_ENGINE_VENVS:-.venvs}}"
mkdir -p "$DIR"

make_venv() {  # NAME PIP-ARGS...: (re)build $DIR/NAME unless its stamp matches
  local name="$1"; shift
  local want="$*"
  if [ -f "$DIR/$name/.infbench-stamp" ] && [ "$(cat "$DIR/$name/.infbench-stamp")" = "$want" ]; then
    return
  fi
  rm -rf "$DIR/$name"
  python3 -m venv "$DIR/$name"
  "$DIR/$name/bin/python" -m pip install -q --no-compile "torch==2.13.0"
  eval "$*"
  echo "$want" > "$DIR/$name/.infbench-stamp"
}

MII_PIP="$DIR/mii/bin/python -m pip install -q --no-compile deepspeed-mii==0.3.3 requests uvicorn pydantic-settings"

SGLANG_PIP="$DIR/sglang/bin/python -m pip install -q --no-compile --no-deps sglang==0.5.23 && $DIR/sglang/bin/python -m pip install -q --no-compile \
numpy orjson psutil pybase64 requests triton packaging pillow starlette msgspec pydantic pyzmq tqdm IPython aiohttp \
openai==2.8.0"

OH_PIP="$DIR/optimum-habana/bin/python -m pip install -q --no-compile optimum-habana==1.21.2 'huggingface_hub<1.0'"

pids=()
names=(mii sglang optimum-habana)
specs=("$MII_PIP" "$SGLANG_PIP" "$OH_PIP")
for i in 0 1 2; do
  (make_venv "${names[$i]}" "${specs[$i]}") > "$DIR/${names[$i]}.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in 0 1 2; do
  if ! wait "${pids[$i]}"; then
    echo "engine venv ${names[$i]} failed to build ($DIR/${names[$i]}.log):" >&2
    tail -40 "$DIR/${names[$i]}.log" >&2
    failed=1
  fi
done
exit "$failed"
