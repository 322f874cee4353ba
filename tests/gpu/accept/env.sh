# shellcheck shell=bash
# tests/gpu/accept.sh (make gpu-accept): the GPU machine's environment:
# what it has, what it can build, where the binaries and data are.
# Sourced; uses the settings of accept.sh.
# ------------------------------------------------------------ environment

# nvsmi ARGS: nvidia-smi under a time limit (NVSMI_TIMEOUT, 20 s; killed 5 s
# later): a wedged driver holds a call for as long as it likes, and the
# device call around it has no minutes to lose (issue 44)
nvsmi() { timeout -k 5 "${NVSMI_TIMEOUT:-20}" "$NVSMI" "$@"; }

# no_gpu: prints why no GPU is usable and succeeds, or fails when one is
no_gpu() {
    local l
    [ "$DEVICE" = cuda ] || return 1
    command -v "$NVSMI" >/dev/null 2>&1 || { echo "nvidia-smi not found"; return 0; }
    local rc=0
    l=$(nvsmi -L 2>&1) || rc=$?
    case $rc in
        0) ;;
        124 | 137) echo "nvidia-smi -L timed out after ${NVSMI_TIMEOUT:-20} s"; return 0 ;;
        *) echo "nvidia-smi -L failed: $(head -1 <<<"$l")"; return 0 ;;
    esac
    grep -q '^GPU ' <<<"$l" || { echo "nvidia-smi lists no GPU"; return 0; }
    return 1
}

gpu_query() {  # FIELD -> first GPU's value
    nvsmi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -1 || true
}

cuda_home() {
    local n
    n=$(command -v nvcc 2>/dev/null || true)
    if [ -n "$n" ]; then dirname "$(dirname "$n")"; else echo /usr/local/cuda; fi
}

nccl_version() {
    local h
    for h in "${NCCL_HOME:-$(cuda_home)}/include/nccl.h" /usr/include/nccl.h; do
        [ -f "$h" ] || continue
        awk '/define NCCL_(MAJOR|MINOR|PATCH)[ \t]/ {v[$2] = $3}
             END {printf "%s.%s.%s (header %s)", v["NCCL_MAJOR"], v["NCCL_MINOR"], v["NCCL_PATCH"], FILENAME}' "$h"
        local libs
        libs=$(ldd "$BIN" 2>/dev/null || true)
        if [ -x "$BIN" ] && ! grep -q libnccl <<<"$libs"; then echo "; bin/transformer not linked with it"; fi
        return
    done
    echo "none (gradients allreduced by MPI on host copies)"
}

commit_id() {
    local c
    if c=$(git -C "$TOP" rev-parse --short=12 HEAD 2>/dev/null); then
        git -C "$TOP" diff --quiet HEAD 2>/dev/null || c="$c (with uncommitted changes)"
        echo "$c"
    elif [ -f "$TOP/build/gpu-libs/COMMIT" ]; then
        echo "$(cat "$TOP/build/gpu-libs/COMMIT") (recorded by --pack)"
    else
        echo "unknown (no git here)"
    fi
}

write_env() {  # AUX/env.md: the lines every summary starts with
    local gpu driver cuda why
    if why=$(no_gpu); then
        gpu="none ($why)"; driver=none
    elif [ "$DEVICE" = cuda ]; then
        gpu="$(gpu_query name), $(gpu_query memory.total), compute capability $(gpu_query compute_cap), $(nvsmi -L | wc -l) visible"
        driver=$(gpu_query driver_version)
    else
        gpu="none: ACCEPT_DEVICE=$DEVICE (a test of the script, not of a GPU)"; driver=none
    fi
    cuda="nvcc $( (nvcc --version 2>/dev/null || echo 'release none,') | sed -n 's/.*release \([^,]*\),.*/\1/p')"
    if [ "$driver" != none ]; then
        local smi
        smi=$(nvsmi 2>/dev/null || true)
        cuda="$cuda; driver supports CUDA $(sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' <<<"$smi" | sed -n 1p)"
    fi
    "${LIB[@]}" header "gpu=$gpu" "driver=$driver" "cuda=$cuda" "nccl=$(nccl_version)" \
        "commit=$(commit_id)" "date=$(date -u '+%Y-%m-%d %H:%M UTC')" "host=$(uname -n), $(nproc) cores" >"$AUX/env.md"
}

cuda_arch() {
    local cc
    if [ -n "${CUDA_ARCH:-}" ]; then echo "$CUDA_ARCH"; return; fi
    cc=$(gpu_query compute_cap | tr -d ' .')
    [ -n "$cc" ] && echo "$cc" || echo native
}

libs_env() {  # the bundled libraries of --pack, where carried and no build here
    local g=$TOP/build/gpu-libs
    can_build && return 0
    if [ -d "$g" ]; then
        LD_LIBRARY_PATH="$g:$(cuda_home)/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export LD_LIBRARY_PATH
    fi
    if [ -d "$g/bin" ]; then export PATH=$g/bin:$PATH; fi   # spm_decode, spm_encode
    if [ -d "$g/python" ]; then export PYTHONPATH=$g/python${PYTHONPATH:+:$PYTHONPATH}; fi   # sacremoses
    if [ -d "$g/ompi" ]; then   # the bundled libmpi with its own components and mpirun
        export OMPI_MCA_mca_base_component_path=$g/ompi/components OMPI_MCA_orte_launch_agent=$g/ompi/bin/orted
        export PATH=$g/ompi/bin:$PATH
    fi
}

# builds here (ACCEPT_NO_BUILD=1: use the packed binaries even so); where it
# does, the pack is neither unpacked nor used, so that nothing mixes the
# machine's own MPI with the bundled one
can_build() {
    [ -z "${ACCEPT_NO_BUILD:-}" ] && command -v nvcc >/dev/null && command -v mpicc >/dev/null &&
        pkg-config --exists hdf5-openmpi 2>/dev/null
}

GPU_BIN=(bin/gpu/test_cuda_kernels bin/gpu/test_cuda_step bin/gpu/gemm_peak bin/gpu/gpu_model)   # gpu_model: tests/gpu/kit.sh
# ensure_built [FILE...]: the binaries a stage needs (default: bin/transformer)
# in place: built for this GPU's architecture alone where this machine builds
# (a no-op when they are), else unpacked from the carried pack
ensure_built() {
    local b need=("$@")
    [ ${#need[@]} -gt 0 ] || need=("$BIN")
    [ "$DEVICE" = cuda ] || { [ -x "$BIN" ] || make -j"$JOBS" all; return; }
    if can_build; then
        make -s -j"$JOBS" CUDA_ARCH="$(cuda_arch)" all "${GPU_BIN[@]}"
    else
        unpack
        libs_env
    fi
    for b in "${need[@]}"; do
        [ -x "$b" ] || { echo "$b missing (no nvcc/mpicc/HDF5 here: carry build/gpu-pack.tgz from --pack)"; return 1; }
    done
}

# the binaries, libraries and data of --pack, carried as one file: unpacked
# on the GPU machine unless this very pack already is (a warm machine keeps
# what the last call unpacked)
unpack() {
    local sum
    [ -f "$PACK" ] || return 0
    sum=$(cksum <"$PACK")
    [ "$sum" = "$(cat build/gpu-libs/PACK_SUM 2>/dev/null)" ] && return 0
    echo "unpacking $PACK ($(tar tzf "$PACK" | wc -l) files, commit $(tar xzOf "$PACK" build/gpu-libs/COMMIT))"
    tar xzf "$PACK" -C "$TOP"
    echo "$sum" >build/gpu-libs/PACK_SUM
}

gpu_count() {  # the GPUs nvidia-smi lists
    nvsmi -L 2>/dev/null | grep -c '^GPU ' || true
}

# bin/transformer has NCCL (ACCEPT_NCCL=0|1 says so for the emulator's
# binaries, whose NCCL is built in)
have_nccl() {
    if [ -n "${ACCEPT_NCCL:-}" ]; then [ "$ACCEPT_NCCL" = 1 ]; return; fi
    grep -q libnccl < <(ldd "$BIN" 2>/dev/null)
}

# mpirun's -x options: the bundled libraries' path, and what the caller adds
mpi_x() {
    local v
    for v in LD_LIBRARY_PATH "$@"; do
        if [ -n "${!v:-}" ]; then printf '%s\n' -x "$v"; fi
    done
}

need_data() {
    [ -f "$DATA" ] && return 0
    [ -n "${ACCEPT_MODEL_ARGS:-}" ] && return 0
    echo "$DATA missing: run input/prepare.sh multi30k where ../shared/data is, and carry data/"
    return 1
}

