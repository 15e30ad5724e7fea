#!/usr/bin/env bash
# The GPU-host check of issue 30, in one prepared script: on an NVIDIA GPU host with no network,
# install infbench from a folder of wheels, then detect, dry-run, run the default sweep (with
# nvidia-smi sampling power every 100 ms beside it), compare infbench with the bare engine
# (benchmarks/harness_overhead.py --gpu), run the nvidia plugin's suite, and write one JSON:
# benchmarks/results/hardware/NAME.json (benchmarks/hardware_runs.py assemble), rendered into
# docs/hardware-runs.md by `python benchmarks/hardware_runs.py index && python benchmarks/docs_numbers.py`.
#
#   bash scripts/gpu_wheels.sh                     # once, on a machine with PyPI: fills .whl/
#   [LLAMA_BUNDLE=artifacts/llama-cuda/llama-cuda.tar.xz] bash scripts/gpu_check.sh [WHEELS] [OUT] [NAME]
#     LLAMA_BUNDLE  scripts/build_llama_cuda.sh's bundle (carried): the llama.cpp CUDA arm (issue 39) replaces the
#                   transformers comparison, and the default sweep runs on llama.cpp (budget 570 s)
#     WHEELS  folder of wheels (default .whl)
#     OUT     where the step outputs and gpu_check.tgz go (default $OUT, else /tmp/gpu_check)
#     NAME    the run's name (default <gpu>-<date>, e.g. h100-2027-01-05)
#
# Budget: under 8 minutes on an H100: each step has its own time limit below, and none runs past
# GPU_CHECK_BUDGET_S (default 520 s) from the script's start less 25 s kept for the JSON and the
# archive (a step that would start with less than 15 s left is skipped, exit "skipped"). On a host without
# an NVIDIA GPU the same script runs (that is how its logic is tested on a CPU): the default sweep
# is the CPU's, the GPU comparison is replaced by a one-shape CPU comparison, nvidia-smi is
# skipped, and the JSON says so.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS="${1:-.whl}"
OUTDIR="${2:-${OUT:-/tmp/gpu_check}}"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
export INFBENCH_HOME="$OUTDIR/home" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
declare -A SECS RCS
T_START=$(date +%s)
LLAMA_BUNDLE="${LLAMA_BUNDLE:-}"
if [ -n "$LLAMA_BUNDLE" ]; then BUDGET="${GPU_CHECK_BUDGET_S:-570}"; else BUDGET="${GPU_CHECK_BUDGET_S:-520}"; fi
step() {  # step NAME LIMIT_S COMMAND...: run it with a time limit, record its seconds and exit status
  local name="$1" limit="$2"; shift 2
  local left=$(( T_START + BUDGET - 25 - $(date +%s) ))
  [ "$name" = assemble ] && left=$(( left + 25 ))
  if [ "$left" -lt 15 ]; then
    echo "### $name: skipped (${left} s left of the ${BUDGET} s budget)"; SECS[$name]=0; RCS[$name]='"skipped"'; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0; t0=$(date +%s%N)
  echo "### $name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  SECS[$name]=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  RCS[$name]=$rc
  echo "### $name: exit $rc after ${SECS[$name]} s"
}
write_steps() {
  { echo "{"; local first=1
    for k in "${!SECS[@]}"; do
      [ $first -eq 1 ] || echo ","; first=0
      printf '  "%s": {"s": %s, "rc": %s}' "$k" "${SECS[$k]}" "${RCS[$k]}"
    done; echo; echo "}"; } > "$OUTDIR/steps.json"
}

# 1. install: the core's missing dependencies, then infbench and the nvidia plugin, from wheels only
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  step install 180 bash -c "$PY -m pip install -q --no-index --no-deps --find-links '$WHEELS' '$WHEELS'/*.whl && \
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --find-links '$WHEELS' . plugins/nvidia"
else
  echo "no wheels in $WHEELS: using the infbench already installed"
fi
# the entry points (infbench, py-spy) land beside the interpreter, which may be a venv not on PATH
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then GPU=1; fi
NAME="${3:-}"
if [ -z "$NAME" ]; then
  if [ $GPU -eq 1 ]; then
    NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/nvidia-//;s/-.*//')"
  else NAME="cpu"; fi
  NAME="$NAME-$(date +%Y-%m-%d)"
  k=2; base="$NAME"
  while [ -e "benchmarks/results/hardware/$NAME.json" ]; do NAME="$base-$k"; k=$((k + 1)); done  # never over a run kept
fi

# 2. detect and the default sweep's plan
step detect 60 bash -c "infbench detect --json > '$OUTDIR/detect.json'"
step dry_run 60 bash -c "infbench run --dry-run --json > '$OUTDIR/dry-run.json'"

# 3. infbench against the bare engine (first: the principal measurement), interleaved (the regime bound by the host's per-step work)
# with the cause study on b1 (where the slowdown comes from: NVML reads in the engine's
# process or in another, a busy Python thread, no sampler, a shorter switch interval) and one
# --no-engine-process cell under py-spy (raw stacks in spy/)
if [ -n "$LLAMA_BUNDLE" ]; then
  # issue 39's arm in place of the transformers comparison (measured: +1.7 %, docs/hardware-runs.md), which does
  # not fit beside it: scripts/gpu_llama_cuda.sh unpacks the llama.cpp CUDA bundle, names it in a site file, and
  # runs LIB's H100 llama.cpp subset (llama-bench and infbench per cell); the default sweep below then picks it
  step llama_cuda 330 env LIB_BUDGET_S=150 bash scripts/gpu_llama_cuda.sh "$LLAMA_BUNDLE" "$OUTDIR/llama_cuda"
  [ -f "$OUTDIR/llama_cuda/site.toml" ] && export INFBENCH_SITE_CONFIG="$OUTDIR/llama_cuda/site.toml"
elif [ $GPU -eq 1 ]; then
  step bare_vs_infbench 280 "$PY" benchmarks/harness_overhead.py --gpu --rounds 3 --cause --spy-dir "$OUTDIR/spy" \
    --out "$OUTDIR/harness.json"
else
  step bare_vs_infbench 280 "$PY" benchmarks/harness_overhead.py --only bare --quick --cause --rounds 2 \
    --spy-dir "$OUTDIR/spy" --out "$OUTDIR/harness.json"
fi

# 4. the default sweep, nvidia-smi sampling power beside it (the energy cross-check)
SMI=""
if [ $GPU -eq 1 ]; then
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,utilization.gpu,memory.used,temperature.gpu \
    --format=csv,noheader,nounits -lms 100 > "$OUTDIR/smi.csv" 2>/dev/null &
  SMI=$!
fi
date +%s.%N > "$OUTDIR/sweep_started_epoch"  # the first timed cell's delay is counted from here
step default_sweep 170 bash -c "infbench run --json > '$OUTDIR/run.json' 2> '$OUTDIR/run.log'"
[ -n "$SMI" ] && kill "$SMI" 2>/dev/null
step results 30 bash -c "infbench results --format json > '$OUTDIR/results.json'"

# 5. the nvidia plugin's suite (must pass on a GPU host as on a CPU)
step plugin_suite 60 bash -c "$PY -m pytest -q -p no:cacheprovider plugins/nvidia/tests > '$OUTDIR/plugins.txt' 2>&1"

# 6. transformers at its best (issue 30, item 7): a static KV cache (compiled); compile_s is stored
# apart from the cell. On a CPU host the same option runs uncompiled on the tiny model.
if [ $GPU -eq 1 ]; then
  step static_cache 120 bash -c "infbench run --engine transformers --model llama-3-8b --dtype bfloat16 --batch 1 \
    --input-len 128 --output-len 128 --engine-arg cache_implementation=static --json > '$OUTDIR/static.json' \
    2> '$OUTDIR/static.log' && infbench results --format json > '$OUTDIR/results_all.json'"
else
  step static_cache 120 bash -c "infbench run --engine transformers --model tiny-random-llama --dtype float32 \
    --batch 1 --input-len 32 --output-len 32 --engine-arg cache_implementation=static --json > '$OUTDIR/static.json' \
    2> '$OUTDIR/static.log' && infbench results --format json > '$OUTDIR/results_all.json'"
fi

# 7. one JSON, and everything in one archive (8 files at most come back from a device machine)
write_steps
step assemble 30 "$PY" benchmarks/hardware_runs.py assemble "$OUTDIR" --name "$NAME" \
  --out "$OUTDIR/$NAME.json"
write_steps
tar czf "$OUTDIR/gpu_check.tgz" -C "$OUTDIR" --exclude=home --exclude=gpu_check.tgz . 2>/dev/null
echo "### done: $OUTDIR/$NAME.json (copy it to benchmarks/results/hardware/, then"
echo "###   python benchmarks/hardware_runs.py index && python benchmarks/docs_numbers.py)"
