#!/usr/bin/env bash
# The llama.cpp CUDA arm on an NVIDIA GPU host (issue 39), one prepared call of at most ~6 minutes:
# unpack scripts/build_llama_cuda.sh's bundle, check it loads against the host torch's CUDA
# libraries and the driver, name it in a site file, then: detect, the default sweep's dry run
# (its engine choice and why), then LLM-Inference-Bench's H100 llama.cpp subset (benchmarks/lib_h100.py: in = out
# 128 and 1024, LIB batch = n_ubatch 1, 16, 64, one sequence) on a dummy f16 Llama-3-8B GGUF, each cell by
# llama.cpp's own llama-bench (LIB's command) and by infbench, beside LIB's published E2E.
#
#   bash scripts/gpu_llama_cuda.sh [BUNDLE_TAR] [OUT]
#     BUNDLE_TAR  default artifacts/llama-cuda/llama-cuda.tar.xz (carried: at most 60 MiB)
#     OUT         default $OUT, else /tmp/gpu_llama_cuda
# Runs this checkout's infbench (PYTHONPATH=core:plugins/nvidia first); its dependencies must be installed.
# LIB_BUDGET_S (default 300): seconds for the LIB cells together (in = out 128 first; a cell past it is skipped and
# said). scripts/gpu_check.sh runs this script as its llama.cpp arm when LLAMA_BUNDLE names the bundle.
set -uo pipefail
cd "$(dirname "$0")/.."
TAR="${1:-artifacts/llama-cuda/llama-cuda.tar.xz}"
OUTDIR="${2:-${OUT:-/tmp/gpu_llama_cuda}}"
mkdir -p "$OUTDIR"; OUTDIR="$(cd "$OUTDIR" && pwd)"
PY="${PYTHON:-python3}"
MODEL="${MODEL:-llama-3-8b}"   # MODEL=tiny checks the script's logic on a CPU with the CPU bundle
export INFBENCH_HOME="${INFBENCH_HOME:-$OUTDIR/home}" PYTHONUNBUFFERED=1  # gpu_check.sh shares its home (one GGUF)
export PYTHONPATH="$PWD/core:$PWD/plugins/nvidia:$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's infbench first
step() { local name="$1" limit="$2"; shift 2; local t0; t0=$(date +%s)
  echo "### $name (limit ${limit} s)"; timeout --kill-after=5 "$limit" "$@"; local rc=$?
  echo "### $name: exit $rc after $(( $(date +%s) - t0 )) s"; }
B="$OUTDIR/bundle"
BENCH_TAR="$(dirname "$TAR")/llama-bench-cuda.tar.xz"   # present when the two packed over 60 MiB together
step unpack 60 bash -c "rm -rf '$B' && tar xJf '$TAR' -C '$OUTDIR' && { [ ! -f '$BENCH_TAR' ] || tar xJf '$BENCH_TAR' -C '$OUTDIR'; } \
  && cat '$B/manifest.json'"
step libs 30 bash -c "LD_LIBRARY_PATH=\$($PY -c 'from infbench.engines.llama_bundle import server_env; from pathlib import Path; print(server_env(Path(\"$B/llama-server\"))[\"LD_LIBRARY_PATH\"])') ldd '$B/llama-server'; '$B/run.sh' llama-server --version"
printf '[llama_server]\nbinary = "%s"\n' "$B/llama-server" > "$OUTDIR/site.toml"
export INFBENCH_SITE_CONFIG="$OUTDIR/site.toml"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUTDIR/nvidia-smi.csv" 2>&1
step detect 60 bash -c "$PY -m infbench.cli detect --json > '$OUTDIR/detect.json'"
step dry_run 60 bash -c "$PY -m infbench.cli run --dry-run --json > '$OUTDIR/dry-run.json'"
step gguf 120 bash -c "$PY -c 'from infbench.data.models import resolve; from infbench.engines.gguf_dummy import dummy_gguf_path; from infbench.data.paths import default_home; print(dummy_gguf_path(resolve(\"$MODEL\"), \"f16\", default_home() / \"cache\" / \"gguf\"))' > '$OUTDIR/gguf.txt'"
GGUF="$(cat "$OUTDIR/gguf.txt" 2>/dev/null)"
# LIB's own command (llama.cpp/H100/llama3-8b.sh: llama-bench -pg IN,OUT -b BATCH -r 1), its pg tests only, for
# the subset of benchmarks/lib_h100.py: the bare engine beside each infbench cell
step llama_bench 180 bash -c "'$B/run.sh' llama-bench -m '$GGUF' -ngl 999 -p 0 -n 0 -pg 128,128 -pg 1024,1024 \
  -b 1,16,64 -r 1 -o json > '$OUTDIR/llama-bench.json'"
step lib_cells 330 $PY benchmarks/lib_h100.py --run --model "$MODEL" --store "$OUTDIR/lib.db" --timeout-s 150 --budget-s "${LIB_BUDGET_S:-300}" \
  --llama-bench "$OUTDIR/llama-bench.json" --out "$OUTDIR/lib_h100.json"
tar czf "$OUTDIR.tgz" -C "$(dirname "$OUTDIR")" --exclude home/cache "$(basename "$OUTDIR")" && echo "wrote $OUTDIR.tgz"
