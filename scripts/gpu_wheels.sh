#!/usr/bin/env bash
# Fill .whl/ with the wheels scripts/gpu_check.sh installs on a GPU host that has no network
# (docs: /work/.library/device/README.md; the H100 host has Python 3.12, torch, transformers,
# nvidia-ml-py, pytest, pluggy, typer, rich, httpx, numpy, but no pydantic, docker SDK or gguf,
# and a setuptools older than pyproject's license field needs). Run where PyPI answers:
#   bash scripts/gpu_wheels.sh [DIR]          # default .whl (ignored by git: .git/info/exclude)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.whl}"
mkdir -p "$DIR"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# with their dependencies (pydantic and pydantic-core must match), then without what the host has
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" -d "$DIR" \
  pydantic docker gguf "setuptools>=80" PyYAML psutil py-cpuinfo prometheus-client uvloop py-spy
rm -f "$DIR"/numpy-*.whl "$DIR"/torch-*.whl "$DIR"/tqdm-*.whl
ls "$DIR"
du -sh "$DIR"
