#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test the
# project: Debian packages (as root, only the missing ones), the Python
# venv .venv for analysis/ from PyPI (pinned in analysis/requirements.txt),
# and .venv-hf for the Hugging Face export (analysis/requirements-hf.txt, on
# top of Debian's python3-torch).
# On a cluster without root, load the equivalent modules instead (README).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES=(
    make gcc g++ libc6-dev pkg-config bc procps curl unzip gzip tar ca-certificates
    openmpi-bin libopenmpi-dev
    libhdf5-openmpi-dev hdf5-tools
    libmpich-dev libhdf5-mpich-dev          # the MPICH build (tests/test_mpich.sh)
    clang libclang-rt-14-dev libomp-14-dev  # make fuzz (libFuzzer, ASan, UBSan)
    libopenblas-openmp-dev
    sentencepiece libsentencepiece-dev
    python3 python3-venv
    python3-torch                           # torch 1.13 for .venv-hf (docs/hf-export.md)
)
[ "${WITH_SLURM:-0}" = 1 ] && APT_PACKAGES+=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    grep -q "install ok installed" < <(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "error: missing Debian packages (run as root, or install them): ${missing[*]}" >&2; exit 2; }
    echo "install-deps: apt-get install ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ -f analysis/requirements.txt ]; then
    stamp=.venv/.requirements.sha256
    want=$(sha256sum analysis/requirements.txt | cut -d' ' -f1)
    if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "install-deps: creating .venv from analysis/requirements.txt"
        python3 -m venv .venv
        .venv/bin/pip install -q --disable-pip-version-check -r analysis/requirements.txt
        echo "$want" > "$stamp"
    fi
fi
# the Hugging Face export/import and its test: a venv that sees Debian's
# python3-torch (system site packages), with transformers from PyPI
if [ -f analysis/requirements-hf.txt ]; then
    stamp=.venv-hf/.requirements.sha256
    want=$(sha256sum analysis/requirements-hf.txt | cut -d' ' -f1)
    if [ ! -x .venv-hf/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "install-deps: creating .venv-hf from analysis/requirements-hf.txt (torch: Debian's python3-torch)"
        /usr/bin/python3 -m venv --system-site-packages .venv-hf
        .venv-hf/bin/pip install -q --disable-pip-version-check -r analysis/requirements-hf.txt
        echo "$want" > "$stamp"
    fi
fi
