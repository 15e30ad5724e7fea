#!/usr/bin/env bash
# Inputs for building the CPU worker image with no container registry and no network in
# the build (used by scripts/test.sh; see containers/README.md):
#  1. infbench/debian-python:bookworm, a Debian 12 root file system made by debootstrap
#     from Debian's mirror (python3 3.11, python3-venv, libgomp1), imported into Docker;
#  2. containers/cpu/wheels/, a wheelhouse of infbench's llamacpp+serve dependencies made
#     by this host's pip (PyPI, or its pip cache; llama-cpp-python's wheel from the build setup
#     made, scripts/llama_cpp_python.sh, is reused).
# The wheels are cp311/manylinux, so this host's Python must be 3.11 like bookworm's.
# Prints the llama-cpp-python version of the wheelhouse (pass it as ENGINE_VERSION).
#   bash containers/cpu/prepare-offline.sh        # both
#   bash containers/cpu/prepare-offline.sh base   # only 1., if missing (scripts/setup.sh runs it in
#                                                 # the background: Debian's downloads and dpkg)
set -euo pipefail
case "${1:-all}" in all | base) ;; *) echo "usage: $0 [base]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
tag=${BASE_TAG:-infbench/debian-python:bookworm}
python=${PYTHON:-python}
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"

pyver=$($python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$pyver" != "3.11" ]; then
    echo "prepare-offline: $python is Python $pyver; the wheels must match bookworm's Python 3.11" >&2
    exit 2
fi

if ! docker image inspect "$tag" > /dev/null 2>&1; then
    command -v debootstrap > /dev/null || $sudo apt-get install -y -q debootstrap >&2
    tmp=$(mktemp -d)
    trap '$sudo rm -rf "$tmp"' EXIT
    echo "prepare-offline: debootstrap bookworm -> $tag" >&2
    $sudo debootstrap --variant=minbase --include=python3,python3-venv,libgomp1,ca-certificates \
        bookworm "$tmp/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$tmp/debootstrap.log" \
        || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
    $sudo rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
    $sudo tar -C "$tmp/rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$tag" > /dev/null
fi

[ "${1:-all}" = base ] && exit 0

wheels="$root/containers/cpu/wheels"
echo "prepare-offline: wheelhouse $wheels" >&2
# llama-cpp-python's wheel as scripts/llama_cpp_python.sh built it for this host's install, if
# there (pip's own cache keeps no wheel built from a folder): not compiled a second time
links=()
for d in "${INFBENCH_TOOLS_DIR:-$HOME/.cache/infbench/tools}"/llama.cpp-*/dist; do
    [ -d "$d" ] && links+=(--find-links "$d")
done
# A wheelhouse that already holds every wheel is completed offline (seconds); else from the index.
if ! $python -m pip wheel -q --no-index --find-links "$wheels" -w "$wheels" ${links[@]+"${links[@]}"} \
        "$root[llamacpp,serve]" setuptools wheel > /dev/null 2>&1; then
    $python -m pip wheel -q -w "$wheels" ${links[@]+"${links[@]}"} "$root[llamacpp,serve]" setuptools wheel >&2
fi
rm -f "$wheels"/infbench-*.whl
ls "$wheels"/llama_cpp_python-*.whl | sed -E 's/.*llama_cpp_python-([^-]+)-.*/\1/' | sort -V | tail -1
