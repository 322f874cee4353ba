#!/usr/bin/env bash
# The test command of the README, and what CI runs: install what is missing,
# build, run every test (make test), then the tests on a real Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_SLURM=1 bash tests/install-deps.sh
make -j2
make test
if grep -q '^test-slurm:' Makefile; then make test-slurm; fi
