#!/usr/bin/env bash
# Build llama.cpp's own `llama-bench` and `llama-perplexity` from the llama.cpp sources that the
# installed llama-cpp-python vendors (its sdist, same version), for the cross-checks in
# tests/integration/test_crosscheck.py and benchmarks/crosscheck_*.py. Only those two targets,
# static (no clash with the pip package's shared libraries), CPU backend, default flags
# (GGML_NATIVE as llama-cpp-python's own build). Idempotent: cached in
#   ${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}/llama.cpp-<version>/bin
# with build.json (version, flags, seconds); delete that folder to rebuild.
#   bash scripts/llama_tools.sh            # prints the bin folder
set -euo pipefail
PY="${PYTHON:-python}"
V="$($PY -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
ROOT="${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}/llama.cpp-$V"
BIN="$ROOT/bin"
if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-perplexity" ] && [ -f "$ROOT/build.json" ]; then
  echo "$BIN"; exit 0
fi
JOBS="${LLAMA_TOOLS_JOBS:-2}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
T0=$(date +%s)
$PY -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$V" -d "$WORK" >&2
tar xzf "$WORK"/llama_cpp_python-"$V".tar.gz -C "$WORK" "llama_cpp_python-$V/vendor/llama.cpp"
SRC="$WORK/llama_cpp_python-$V/vendor/llama.cpp"
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
cmake -S "$SRC" -B "$WORK/build" "${FLAGS[@]}" >&2
T1=$(date +%s)
cmake --build "$WORK/build" --target llama-bench llama-perplexity -j "$JOBS" >&2
T2=$(date +%s)
mkdir -p "$BIN"
cp "$WORK/build/bin/llama-bench" "$WORK/build/bin/llama-perplexity" "$BIN/"
cat > "$ROOT/build.json" <<JSON
{"llama_cpp_python": "$V", "source": "llama-cpp-python $V sdist, vendor/llama.cpp",
 "cmake_flags": "${FLAGS[*]}", "jobs": $JOBS, "download_configure_s": $((T1 - T0)), "build_s": $((T2 - T1)),
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "host_cpus": $(nproc)}
JSON
echo "$BIN"
