#!/usr/bin/env bash
# Build llama.cpp's `llama-server` and `llama-bench` with the CUDA backend on this CPU-only machine,
# for a GPU host that has no network and takes at most 64 MiB per carry (issue 39).
#
#   nice -n 19 bash scripts/build_llama_cuda.sh > /work/notes/cuda_build.log 2>&1 &
#
# Stages (each skipped when its marker exists, so a killed build resumes where it stopped):
#   1. toolchain: CUDA 13.0 wheels from PyPI (nvcc/ptxas, cicc, crt headers, cudart, cublas, cccl),
#      `pip install --target` into $ART/cuda-toolchain. 13.0 = the CUDA of the host's torch
#      (2.11.0+cu130): a binary linked against newer cudart/cublas headers could need symbols the
#      host's 13.0 libraries lack.
#   2. sources: the llama.cpp that the installed llama-cpp-python vendors (its sdist, same version),
#      as scripts/llama_tools.sh does: one version of llama.cpp across infbench.
#   3. configure: GGML_CUDA=ON for sm_80 (A100) and sm_90 (H100/H200) SASS only ("80-real;90-real":
#      no PTX, which would only serve a JIT on future GPUs and costs size), GGML_NATIVE=OFF (the
#      GPU host's CPU is not this one), static llama/ggml (BUILD_SHARED_LIBS=OFF), dynamic cudart and
#      cublas (found on the host in torch's nvidia/* wheels), libcuda linked against the toolchain's
#      stub (the driver comes from the host). CUDA_ARCHS overrides the architectures.
#   4. build: only llama-server and llama-bench, -j ${JOBS:-2}.
#   5. bundle: stripped binaries, RUNPATH $ORIGIN, a launcher `run.sh` that puts the host torch's
#      CUDA library folders on LD_LIBRARY_PATH, manifest.json (sha256 per file, llama.cpp version,
#      cmake flags, sizes, build seconds), and llama-cuda.tar.xz (xz, 256 MiB window); when
#      server and bench together pack over 60 MiB, llama-bench goes into llama-bench-cuda.tar.xz;
#      refused (exit 3) when llama-cuda.tar.xz alone is over 60 MiB.
# Result: $ART/bundle/ and $ART/llama-cuda.tar.xz, ART=${INFBENCH_CUDA_DIR:-<repo>/artifacts/llama-cuda}
# (ignored by git). Delete a stage's marker ($ART/.stage-*) to redo it.
#
# LLAMA_BACKEND=cpu builds the same bundle without CUDA (no toolchain stage) into
# artifacts/llama-cpu: the CPU stand-in of the CUDA build for the integration test
# (tests/integration/test_llama_server_binary.py), through the same engine option.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
BACKEND="${LLAMA_BACKEND:-cuda}"
case "$BACKEND" in cuda|cpu) ;; *) echo "LLAMA_BACKEND must be cuda or cpu" >&2; exit 2 ;; esac
ART="${INFBENCH_CUDA_DIR:-$REPO/artifacts/llama-$BACKEND}"
TC="$ART/cuda-toolchain"
JOBS="${JOBS:-2}"
CUDA_ARCHS="${CUDA_ARCHS:-80-real;90-real}"
CUDA_PIN="${CUDA_PIN:-13.0.*}"
MAX_BYTES=$((60 * 1024 * 1024))
mkdir -p "$ART"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
T_START=$(date +%s)
[ -f "$ART/times.env" ] && . "$ART/times.env"

# ---- 1. toolchain -------------------------------------------------------------------------------
MERGED="$ART/cuda-merged"
STUBS="$MERGED/lib/stubs"
if [ "$BACKEND" = cuda ]; then
if [ ! -f "$ART/.stage-toolchain" ]; then
  log "stage 1: CUDA $CUDA_PIN toolchain wheels -> $TC"
  t0=$(date +%s)
  rm -rf "$TC"
  $PY -m pip install -q --no-deps --target "$TC" \
    "nvidia-cuda-nvcc==$CUDA_PIN" "nvidia-nvvm==$CUDA_PIN" "nvidia-cuda-crt==$CUDA_PIN" \
    "nvidia-cuda-runtime==$CUDA_PIN" "nvidia-cublas==${CUBLAS_PIN:-13.0.*}" "nvidia-cuda-cccl==$CUDA_PIN"
  echo "TOOLCHAIN_S=$(( $(date +%s) - t0 ))" >> "$ART/times.env"
  $PY -m pip list --path "$TC" 2>/dev/null | grep -i nvidia > "$ART/toolchain-versions.txt" || true
  touch "$ART/.stage-toolchain"
fi
NVCC="$(find "$TC" -path '*/bin/nvcc' -type f | head -1)"
[ -n "$NVCC" ] || { log "no nvcc under $TC"; exit 2; }
CUDA_HOME="$(dirname "$(dirname "$NVCC")")"
log "CUDA_HOME=$CUDA_HOME"
# The wheels may spread the toolkit over several roots (nvidia/cu13, nvidia/cuda_nvcc, ...): merge
# them by symlinks into one tree as nvcc and CMake's FindCUDAToolkit expect (bin, nvvm, include, lib).
if [ ! -f "$ART/.stage-merged" ]; then
  rm -rf "$MERGED"; mkdir -p "$MERGED"/{bin,include,lib,lib/stubs}
  for root in $(find "$TC/nvidia" -mindepth 1 -maxdepth 1 -type d); do
    for sub in bin include lib lib64 nvvm; do
      [ -d "$root/$sub" ] || continue
      if [ "$sub" = nvvm ]; then
        [ -e "$MERGED/nvvm" ] || ln -s "$root/nvvm" "$MERGED/nvvm"; continue
      fi
      dst="$MERGED/$sub"; [ "$sub" = lib64 ] && dst="$MERGED/lib"
      (cd "$root/$sub" && find . \( -type f -o -type l \) -print) | while read -r f; do
        mkdir -p "$dst/$(dirname "$f")"
        [ -e "$dst/$f" ] || ln -s "$root/$sub/$f" "$dst/$f"
      done
    done
  done
  # unversioned names for the linker (wheels ship only the .so.N)
  for so in "$MERGED"/lib/lib*.so.[0-9]*; do
    [ -e "$so" ] || continue
    base="${so%%.so.*}.so"; [ -e "$base" ] || ln -s "$(readlink -f "$so")" "$base"
  done
  if [ ! -e "$MERGED/lib/stubs/libcuda.so" ]; then
    stub="$(find "$TC" -name 'libcuda.so' -path '*stubs*' | head -1)"
    [ -n "$stub" ] && ln -s "$stub" "$MERGED/lib/stubs/libcuda.so"
  fi
  touch "$ART/.stage-merged"
fi
# nvcc.profile links from $CUDA_HOME/lib64 (and lib64/stubs)
[ -e "$MERGED/lib64" ] || ln -s lib "$MERGED/lib64"
NVCC="$MERGED/bin/nvcc"
log "nvcc: $("$NVCC" --version | tail -2 | tr '\n' ' ')"
fi

# ---- 2. sources ---------------------------------------------------------------------------------
V="$($PY -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
SRC="$ART/src/llama_cpp_python-$V/vendor/llama.cpp"
if [ ! -f "$ART/.stage-src" ]; then
  log "stage 2: llama.cpp from the llama-cpp-python $V sdist"
  mkdir -p "$ART/src"
  [ -f "$ART/src/llama_cpp_python-$V.tar.gz" ] || \
    $PY -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$V" -d "$ART/src"
  tar xzf "$ART/src/llama_cpp_python-$V.tar.gz" -C "$ART/src" "llama_cpp_python-$V/vendor/llama.cpp"
  touch "$ART/.stage-src"
fi
LLAMA_COMMIT="$(grep -rhoE 'LLAMA_BUILD_COMMIT[^)]*' "$SRC/CMakeLists.txt" 2>/dev/null | head -1 || true)"

# ---- 3. configure -------------------------------------------------------------------------------
BUILD="$ART/build"
VMM_FLAG=()
if [ "$BACKEND" = cuda ] && [ ! -e "$STUBS/libcuda.so" ]; then
  # no driver stub in the wheels: do without the VMM pool, which is the only direct libcuda user
  log "no libcuda stub found: GGML_CUDA_NO_VMM=ON"
  VMM_FLAG=(-DGGML_CUDA_NO_VMM=ON)
fi
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF
       -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_EXAMPLES=OFF)
CUDA_CMAKE=()
# libstdc++ stays dynamic: linked in (-static-libstdc++), gcc 12's needs glibc 2.36 (arc4random),
# newer than Ubuntu 22.04's 2.35, while the dynamic one needs GLIBCXX_3.4.30 (libstdc++ 12, which
# Ubuntu 22.04 has) and glibc 2.34 at most. The bundle step logs the newest versions needed.
LINK_FLAGS="${LINK_FLAGS:-}"
if [ "$BACKEND" = cuda ]; then
  FLAGS+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS" "${VMM_FLAG[@]}")
  CUDA_CMAKE=(-DCMAKE_CUDA_COMPILER="$NVCC" -DCUDAToolkit_ROOT="$MERGED" -DCMAKE_LIBRARY_PATH="$STUBS")
  LINK_FLAGS="$LINK_FLAGS -L$STUBS -Wl,-rpath-link,$MERGED/lib"
else
  CUDA_ARCHS=none
fi
if [ ! -f "$ART/.stage-configure" ]; then
  log "stage 3: cmake ${FLAGS[*]}"
  t0=$(date +%s)
  # in place (no rm): a re-configure with other link flags only relinks
  export CUDA_PATH="$MERGED" CUDAToolkit_ROOT="$MERGED" PATH="$MERGED/bin:$PATH"
  cmake -S "$SRC" -B "$BUILD" "${FLAGS[@]}" "${CUDA_CMAKE[@]}" "-DCMAKE_EXE_LINKER_FLAGS=$LINK_FLAGS" \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' 
  echo "CONFIGURE_S=$(( $(date +%s) - t0 ))" >> "$ART/times.env"
  touch "$ART/.stage-configure"
fi

# ---- 4. build -----------------------------------------------------------------------------------
if [ ! -f "$ART/.stage-build" ]; then
  log "stage 4: build llama-server llama-bench -j $JOBS (an hour or more on 2 cores)"
  t0=$(date +%s)
  export PATH="$MERGED/bin:$PATH"
  cmake --build "$BUILD" --target llama-server llama-bench -j "$JOBS"
  # accumulate: a resumed build adds its seconds to the earlier attempts'
  echo "BUILD_S=$(( ${BUILD_S:-0} + $(date +%s) - t0 ))" >> "$ART/times.env"
  touch "$ART/.stage-build"
fi
[ -f "$ART/times.env" ] && . "$ART/times.env"

# ---- 5. bundle ----------------------------------------------------------------------------------
log "stage 5: bundle"
B="$ART/bundle"
rm -rf "$B"; mkdir -p "$B"
cp "$BUILD/bin/llama-server" "$BUILD/bin/llama-bench" "$B/"
strip --strip-unneeded "$B/llama-server" "$B/llama-bench"
cat > "$B/run.sh" <<'SH'
#!/usr/bin/env bash
# Run a binary of this bundle with the CUDA libraries (cudart, cublas, cublasLt) of the host's
# Python CUDA wheels (torch's: nvidia/cu13/lib, or nvidia/cuda_runtime/lib + nvidia/cublas/lib)
# on LD_LIBRARY_PATH. libcuda comes from the driver.   run.sh llama-server --version
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LIBS="$(${PYTHON:-python3} - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
dirs = []
for root in (spec.submodule_search_locations if spec else []):
    for sub in ("cu13/lib", "cuda_runtime/lib", "cublas/lib"):
        d = os.path.join(root, sub)
        if os.path.isdir(d):
            dirs.append(d)
print(":".join(dirs))
PY
)"
export LD_LIBRARY_PATH="$HERE${LIBS:+:$LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exe="$1"; shift
exec "$HERE/$exe" "$@"
SH
chmod +x "$B/run.sh"
VERSION_LINE="$(LD_LIBRARY_PATH="$MERGED/lib:$STUBS" "$B/llama-server" --version 2>&1 | grep -i version | head -1 || true)"
ldd_out="$(LD_LIBRARY_PATH="$MERGED/lib:$STUBS" ldd "$B/llama-server" || true)"
echo "$ldd_out"
if echo "$ldd_out" | grep -q 'not found'; then log "unresolved libraries (see ldd above)"; fi
log "newest symbol versions needed: $(objdump -T "$B/llama-server" | grep -o 'GLIBC_[0-9.]*\|GLIBCXX_[0-9.]*' | sort -uV | tail -2 | tr '\n' ' ')"
# xz with a 256 MiB window, the two binaries next to each other: llama-bench's copy of the CUDA
# kernels compresses against llama-server's (tar -J's default 8 MiB window sees no such match).
# Decompressing needs 256 MiB of memory. pack OUT FILE...: files relative to $ART.
pack() { local out="$1"; shift; (cd "$ART" && tar -cf - "$@" | xz -T1 --lzma2=preset=9e,dict=256MiB > "$out.part") \
           && mv "$ART/$out.part" "$ART/$out"; }
PARTS=(bundle/llama-server bundle/llama-bench bundle/run.sh)
pack "llama-$BACKEND.tar.xz" "${PARTS[@]}"
TAR_BYTES=$(stat -c %s "$ART/llama-$BACKEND.tar.xz")
rm -f "$ART/llama-bench-$BACKEND.tar.xz"
if [ "$TAR_BYTES" -gt "$MAX_BYTES" ]; then
  # too big together: llama-bench travels in a carry of its own
  log "server + bench packed: $TAR_BYTES bytes, over $MAX_BYTES: llama-bench goes in llama-bench-$BACKEND.tar.xz"
  PARTS=(bundle/llama-server bundle/run.sh)
  pack "llama-bench-$BACKEND.tar.xz" bundle/llama-bench
  pack "llama-$BACKEND.tar.xz" "${PARTS[@]}"
  TAR_BYTES=$(stat -c %s "$ART/llama-$BACKEND.tar.xz")
fi
FLAGS_STR="${FLAGS[*]}"
export PARTS_STR="${PARTS[*]}"
export LINK_FLAGS BACKEND B V FLAGS_STR CUDA_ARCHS TAR_BYTES MAX_BYTES VERSION_LINE LLAMA_COMMIT JOBS
export TOOLCHAIN_S="${TOOLCHAIN_S:-0}" CONFIGURE_S="${CONFIGURE_S:-0}" BUILD_S="${BUILD_S:-0}"
export TOOLCHAIN_VERSIONS="$(tr -s ' ' < "$ART/toolchain-versions.txt" 2>/dev/null | tr '\n' ';' || true)"
$PY - <<'PY'
import hashlib, json, os, time
b = os.environ["B"]
files = {}
for name in sorted(os.listdir(b)):
    p = os.path.join(b, name)
    with open(p, "rb") as f:
        files[name] = {"sha256": hashlib.sha256(f.read()).hexdigest(), "bytes": os.path.getsize(p)}
manifest = {
    "schema": 1,
    "backend": os.environ["BACKEND"],
    "llama_cpp_python": os.environ["V"],
    "llama_cpp_version": os.environ["VERSION_LINE"],
    "source": f"llama-cpp-python {os.environ['V']} sdist, vendor/llama.cpp",
    "cmake_flags": os.environ["FLAGS_STR"],
    "link_flags": os.environ["LINK_FLAGS"],
    "cuda_architectures": os.environ["CUDA_ARCHS"],
    "cuda_toolchain": os.environ["TOOLCHAIN_VERSIONS"],
    "files": files,
    "bundle_bytes": sum(f["bytes"] for f in files.values()),
    "tar_xz_bytes": int(os.environ["TAR_BYTES"]),
    "tar_xz_files": os.environ["PARTS_STR"].split(),
    "max_bytes": int(os.environ["MAX_BYTES"]),
    "jobs": int(os.environ["JOBS"]),
    "toolchain_s": int(os.environ["TOOLCHAIN_S"]),
    "configure_s": int(os.environ["CONFIGURE_S"]),
    "build_s": int(os.environ["BUILD_S"]),
    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "host_cpus": os.cpu_count(),
}
with open(os.path.join(b, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
print(json.dumps(manifest, indent=1))
PY
# the tarball again, now with the manifest in it
pack "llama-$BACKEND.tar.xz" "${PARTS[@]}" bundle/manifest.json
TAR_BYTES=$(stat -c %s "$ART/llama-$BACKEND.tar.xz")
[ -f "$ART/llama-bench-$BACKEND.tar.xz" ] && log "llama-bench-$BACKEND.tar.xz: $(stat -c %s "$ART/llama-bench-$BACKEND.tar.xz") bytes"
log "bundle: $(du -sb "$B" | cut -f1) bytes unpacked, llama-$BACKEND.tar.xz $TAR_BYTES bytes (limit $MAX_BYTES)"
if [ "$TAR_BYTES" -gt "$MAX_BYTES" ]; then
  log "REFUSED: the bundle is over 60 MiB"; exit 3
fi
log "done in $(( $(date +%s) - T_START )) s this run"
