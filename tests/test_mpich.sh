#!/usr/bin/env bash
# The project builds and trains with MPICH as well as Open MPI: `make
# MPI=mpich` (Debian's mpicc.mpich and hdf5-mpich, the CUDA object included
# when nvcc is here: nvcc needs mpi.h from MPICH's -compile_info) in a copy of
# the sources, then 20 steps on 2 ranks under MPICH's mpiexec give parameters
# bitwise equal to 2 ranks under Open MPI's mpirun (a sum of two gradients is
# the same in either order).
set -u
. "$(dirname "$0")/lib.sh"
command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null && pkg-config --exists hdf5-mpich ||
    skip "no MPICH (apt-get install libmpich-dev libhdf5-mpich-dev, or tests/install-deps.sh)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$TOP" || fail "$TOP"
mkdir -p "$tmp/src"
tar -cf - Makefile src cuda tests/*.c tests/*.h tests/cuda | tar -xf - -C "$tmp/src" || fail "cannot copy the sources"
# what is tested is MPICH's headers and link with the CUDA object, not its
# device code (the main build compiles and checks that for every
# architecture): one architecture as PTX alone (no ptxas) and unoptimised
# (-O0 -G).  Measured: nvcc 52 -> 19 CPU s; cicc, ptxas and the host
# compile at -O3 were 27, 14 and 27 s of its 70 s beside a busy core
NVCCFLAGS="-O0 -G" make -C "$tmp/src" -s -j2 MPI=mpich CUDA_ARCH=80 \
    NVCC_ARCH="-gencode arch=compute_80,code=compute_80" bin/transformer > "$tmp/build.log" 2>&1 ||
    { tail -n 20 "$tmp/build.log"; fail "make MPI=mpich failed"; }
grep -q 'warning' "$tmp/build.log" && { cat "$tmp/build.log"; fail "make MPI=mpich: warnings"; }
ldd "$tmp/src/bin/transformer" | grep -q libmpich || fail "the MPICH build does not link libmpich"
nvcc=""; grep -q 'NVCC' "$tmp/build.log" && nvcc=", CUDA object included"
A="--config input/synthetic-test.cfg train_steps=20 log_steps=20 threads=1"
timeout -s KILL 120 mpiexec.mpich -n 2 "$tmp/src/bin/transformer" train $A run_dir="$tmp/mpich" > "$tmp/mpich.log" 2>&1 ||
    { cat "$tmp/mpich.log"; fail "2 ranks under mpiexec.mpich failed"; }
grep -q '^train: .* 2 ranks' "$tmp/mpich.log" || fail "MPICH: not 2 ranks: $(head -n 3 "$tmp/mpich.log")"
timeout -s KILL 120 mpirun -np 2 "$BIN" train $A run_dir="$tmp/ompi" > "$tmp/ompi.log" 2>&1 ||
    { cat "$tmp/ompi.log"; fail "2 ranks under Open MPI failed"; }
h5diff -q "$tmp/mpich/ckpt_00000020.h5" "$tmp/ompi/ckpt_00000020.h5" /params /params ||
    fail "MPICH and Open MPI: the step-20 parameters differ"
ok "make MPI=mpich$nvcc; 2 ranks under MPICH equal 2 ranks under Open MPI after 20 steps, bit for bit"
