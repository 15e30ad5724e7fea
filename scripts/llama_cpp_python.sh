#!/usr/bin/env bash
# Install llama-cpp-python (the in-process `llama.cpp` engine) from its sdist, compiled here, in a
# build tree that is kept, so that scripts/llama_tools.sh builds llama.cpp's own `llama-bench` and
# `llama-perplexity` from the same compiled libraries (libllama, libggml, libllama-common) instead
# of compiling llama.cpp a second time: the cross-checks then run the very code the engine runs,
# and a fresh install skips about 5 minutes of compiling on 2 cores
# (benchmarks/results/llama_tools_build.json).
#
# The version is the newest that pyproject's `llamacpp` extra admits, the one
# `pip install -e ".[llamacpp]"` would build. Built with llama-cpp-python's documented source-build
# switch, CMAKE_ARGS (infbench.libs.llama.LLAMA_CPP_CMAKE_ARGS: no multimodal library, tests,
# tools, examples or server), with make (CMAKE_GENERATOR: the tree is built again later by the
# system's cmake and make, so it must not name the build's temporary ninja). Skipped when
# llama-cpp-python is installed. The tree, and the wheel (dist/: pip keeps no wheel built from a
# folder in its cache, so containers/cpu/prepare-offline.sh looks there, not to compile it again):
#   ${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}/llama.cpp-<version>/{src,build,dist}
# (about 0.3 GB: sources 223 MB, objects 44 MB, wheel 20 MB; without it llama_tools.sh builds the
# tools static, from nothing).
#   bash scripts/llama_cpp_python.sh           # build the wheel, then install it
#   bash scripts/llama_cpp_python.sh build     # only build it (scripts/setup.sh runs this in the
#                                              # background: compiling is CPU-bound, the other
#                                              # installs mostly wait for downloads and disks)
#   bash scripts/llama_cpp_python.sh install   # only install the wheel built before (from dist/,
#                                              # never from PyPI's sdist: --only-binary)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
ACTION="${1:-all}"
case "$ACTION" in all | build | install) ;; *) echo "usage: $0 [build|install]" >&2; exit 2 ;; esac
if $PY -c 'import importlib.metadata as m; m.version("llama_cpp_python")' 2>/dev/null; then
  exit 0
fi
TOOLS="${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}"
SPEC="$($PY - <<'EOF'
import tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llamacpp"]
print(next(d for d in extra if d.lower().replace("_", "-").startswith("llama-cpp-python")))
EOF
)"
if [ "$ACTION" = install ]; then
  # the newest wheel built here that the extra admits (a tree per version: llama.cpp-<version>/dist)
  $PY -m pip install -q --only-binary llama-cpp-python $(for d in "$TOOLS"/llama.cpp-*/dist; do
    echo --find-links "$d"; done) "$SPEC"
  exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# --no-binary on llama-cpp-python only: ":all:" would also compile its build backend
# (scikit-build-core) from its sdist, and that one's own build backend: 52 s instead of 7 s here
$PY -m pip download -q --no-deps --no-binary llama-cpp-python "$SPEC" -d "$WORK"
SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz)"
V="${SDIST##*/llama_cpp_python-}"
V="${V%.tar.gz}"
ROOT="$TOOLS/llama.cpp-$V"
rm -rf "$ROOT/src" "$ROOT/build"
mkdir -p "$ROOT"
tar xzf "$SDIST" -C "$WORK"
mv "$WORK/llama_cpp_python-$V" "$ROOT/src"
rm -rf "$ROOT/dist"
CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_SERVER=OFF" CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  $PY -m pip wheel -q --no-deps "$ROOT/src" -w "$ROOT/dist" --config-settings=build-dir="$ROOT/build"
if [ "$ACTION" = all ]; then
  $PY -m pip install -q "$ROOT/dist/llama_cpp_python-$V-"*.whl
fi
