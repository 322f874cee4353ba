#!/usr/bin/env bash
# Copies the shared libraries that bin/transformer and bin/gpu/* load from
# the distribution (MPI, HDF5 and their dependencies) into DIR, so that a
# bare GPU machine with its own CUDA, libstdc++ and OpenBLAS can run the
# binaries built here:  LD_LIBRARY_PATH=DIR:/usr/local/cuda/lib64 ...
# Leaves out glibc, libstdc++/libgcc_s, CUDA/NCCL and OpenBLAS (large, and
# present there).  Build without NCCL for such a machine (NCCL_HOME=/none)
# unless it has libnccl.
set -euo pipefail
dir=${1:?usage: bundle_libs.sh DIR}
cd "$(dirname "$0")/../.."
mkdir -p "$dir"
ldd bin/transformer bin/gpu/test_cuda_kernels bin/gpu/test_cuda_step | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
    grep -v -E 'cuda|nccl|cublas|openblas' |
    while read -r lib; do cp -L "$lib" "$dir/"; done
du -sh "$dir"
