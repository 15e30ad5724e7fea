#!/usr/bin/env bash
# Build llama.cpp's own `llama-bench` and `llama-perplexity` from the llama.cpp sources that the
# installed llama-cpp-python vendors (same version), for the cross-checks in
# tests/integration/test_crosscheck.py and benchmarks/crosscheck_*.py. Two ways, the first that works:
#   * in llama-cpp-python's own build tree, kept by scripts/llama_cpp_python.sh: the tree is
#     configured again with the tools on and only the two targets are built, linked against the
#     libraries already compiled there (libllama, libggml, libllama-common: the code the in-process
#     engine runs, same flags); seconds, not minutes. The tools find those libraries in the tree
#     (their RPATH), which stays in the cache beside them;
#   * otherwise (llama-cpp-python installed another way, or its tree gone) from the sdist, static
#     (no clash with the pip package's shared libraries), CPU backend, default flags (GGML_NATIVE as
#     llama-cpp-python's own build): minutes on 2 cores.
# Idempotent: cached in
#   ${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}/llama.cpp-<version>/bin
# with build.json (version, way, flags, seconds); built again when a tool is missing or no longer
# finds its libraries; delete that folder to rebuild.
#   bash scripts/llama_tools.sh            # prints the bin folder
set -euo pipefail
PY="${PYTHON:-python}"
V="$($PY -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
ROOT="${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}/llama.cpp-$V"
BIN="$ROOT/bin"
usable() {  # both tools there, each finding its shared libraries
  local t
  for t in llama-bench llama-perplexity; do
    [ -x "$BIN/$t" ] || return 1
    if ldd "$BIN/$t" 2>/dev/null | grep -q "not found"; then return 1; fi
  done
  [ -f "$ROOT/build.json" ]
}
if usable; then
  echo "$BIN"; exit 0
fi
JOBS="${LLAMA_TOOLS_JOBS:-2}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$BIN"
T0=$(date +%s)
TREE="$ROOT/build"
if [ -f "$TREE/CMakeCache.txt" ] && [ -d "$ROOT/src" ] \
   && cmake -S "$ROOT/src" -B "$TREE" -DLLAMA_BUILD_TOOLS=ON >&2; then
  WAY="llama-cpp-python's build tree (its libllama, libggml and libllama-common, shared)"
  FLAGS=(-DLLAMA_BUILD_TOOLS=ON "(on llama-cpp-python's own configuration)")
  OUT="$TREE/bin"
else
  WAY="static, from the sdist"
  $PY -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$V" -d "$WORK" >&2
  tar xzf "$WORK"/llama_cpp_python-"$V".tar.gz -C "$WORK" "llama_cpp_python-$V/vendor/llama.cpp"
  SRC="$WORK/llama_cpp_python-$V/vendor/llama.cpp"
  FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
         -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
  TREE="$WORK/build"
  cmake -S "$SRC" -B "$TREE" "${FLAGS[@]}" >&2
  OUT="$TREE/bin"
fi
T1=$(date +%s)
cmake --build "$TREE" --target llama-bench llama-perplexity -j "$JOBS" >&2
T2=$(date +%s)
cp "$OUT/llama-bench" "$OUT/llama-perplexity" "$BIN/"
cat > "$ROOT/build.json" <<JSON
{"llama_cpp_python": "$V", "source": "llama-cpp-python $V sdist, vendor/llama.cpp", "way": "$WAY",
 "cmake_flags": "${FLAGS[*]}", "jobs": $JOBS, "download_configure_s": $((T1 - T0)), "build_s": $((T2 - T1)),
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "host_cpus": $(nproc)}
JSON
echo "$BIN"
