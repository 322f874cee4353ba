# bin/transformer: C11 host code (src/), optional CUDA backend (cuda/).
# `make` builds; `make test` runs every test; `make bench` the benchmarks.
# MPI: Open MPI (Debian's default mpicc) or MPICH (`make MPI=mpich`: Debian's
# mpicc.mpich and hdf5-mpich).  Elsewhere: `make CC=mpicc HDF5_PKG=...`.
MPI      ?= openmpi
# build on every core unless -j is given (-j1 for one job at a time): a
# cold `make test` compiles the emulated CUDA backend twice, about 40 s
# each, and on 2 cores in turn that put it past 10 minutes.  One goal only:
# `make clean all` or `make test test-slurm` keep running in turn
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter clean,$(MAKECMDGOALS))$(word 2,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
# the test, benchmark and GPU scripts run as if from the shell: a make
# they start (test_mpich builds with -j2) must not find this one's
# jobserver, flags or level in its environment
SCRIPT := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL
# a module's mpicc (not the distribution's /usr/bin one) comes first; on
# Debian mpicc.$(MPI) picks the MPI of MPI=
MPICC_ON_PATH := $(shell command -v mpicc 2>/dev/null)
CC       := $(if $(filter-out /usr/bin/mpicc,$(MPICC_ON_PATH)),mpicc,$(if $(shell command -v mpicc.$(MPI) 2>/dev/null),mpicc.$(MPI),mpicc))
# parallel HDF5: HDF5_PKG by pkg-config (Debian: hdf5-openmpi, hdf5-mpich),
# else a module's HDF5_DIR or HDF5_ROOT (include/, lib/)
HDF5_PKG ?= hdf5-$(MPI)
HDF5_HOME ?= $(or $(HDF5_DIR),$(HDF5_ROOT))
ifeq ($(shell pkg-config --exists $(HDF5_PKG) && echo y),y)
HDF5_CFLAGS := $(shell pkg-config --cflags $(HDF5_PKG))
HDF5_LIBS := $(shell pkg-config --libs $(HDF5_PKG))
else ifneq ($(wildcard $(HDF5_HOME)/include/hdf5.h),)
HDF5_CFLAGS := -I$(HDF5_HOME)/include
HDF5_LIBS := -L$(HDF5_HOME)/lib -lhdf5
else
NOTE_HDF5 := note: parallel HDF5 not found (no pkg-config $(HDF5_PKG), no HDF5_DIR/HDF5_ROOT): set HDF5_PKG= or load the HDF5 module
HDF5_LIBS := -lhdf5
endif
# OpenBLAS by pkg-config: the environment's PKG_CONFIG_PATH (modules) first,
# then Debian's OpenMP build of it
OPENBLAS_PC ?= /usr/lib/x86_64-linux-gnu/openblas-openmp/pkgconfig
OPENBLAS_PKG_PATH := $(if $(PKG_CONFIG_PATH),$(PKG_CONFIG_PATH):)$(OPENBLAS_PC)
OPENBLAS_LIBDIR := $(shell PKG_CONFIG_PATH=$(OPENBLAS_PKG_PATH) pkg-config --variable=libdir openblas 2>/dev/null)
ifeq ($(OPENBLAS_LIBDIR),)
NOTE_BLAS := note: OpenBLAS not found by pkg-config (PKG_CONFIG_PATH, OPENBLAS_PC): linking -lopenblas from the default paths
endif
ARCH     ?= -march=x86-64-v3
CFLAGS   ?= -O3 $(ARCH) -fno-math-errno
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -MMD -MP $(HDF5_CFLAGS) \
            $(shell PKG_CONFIG_PATH=$(OPENBLAS_PKG_PATH) pkg-config --cflags openblas 2>/dev/null)
# rpath for every library directory outside the linker's defaults (HDF5,
# MPI, OpenBLAS): a job runs the binary without the build's modules loaded
MPI_LIBDIRS := $(shell $(CC) --showme:libdirs 2>/dev/null || $(CC) -link_info 2>/dev/null | tr ' ' '\n' | sed -n 's/^-L//p')
RPATH_DIRS := $(filter-out /usr/lib /usr/lib64 /usr/lib/x86_64-linux-gnu,\
              $(patsubst -L%,%,$(filter -L%,$(HDF5_LIBS))) $(MPI_LIBDIRS) $(OPENBLAS_LIBDIR))
LDLIBS   += $(HDF5_LIBS) $(if $(OPENBLAS_LIBDIR),-L$(OPENBLAS_LIBDIR)) -lopenblas -lm \
            $(foreach d,$(sort $(RPATH_DIRS)),-Wl,-rpath,$(d))
LDFLAGS  += -fopenmp
BASE_LDLIBS := $(LDLIBS)

# quiet by default: one line per target (`CC src/model.c`); `make V=1` prints
# the commands.  $(call say,TAG,WHAT) starts a recipe line, $(Q) the others.
ifeq ($(V),1)
say :=
Q :=
else
say = @printf '  %-7s %s\n' '$(1)' '$(2)';
Q := @
endif

# CUDA backend: built when nvcc is found (`make NVCC=` builds CPU-only).
# CUDA_ARCH: compute capabilities (default 70 80 90 = V100, A100, H100) or
# `native`; SASS for each, and PTX of the last, which newer GPUs compile at
# load time.  CUDA 13's nvcc dropped sm_70: with it the default is 75 80 90
# (T4 and up; a V100 needs a CUDA 12 nvcc).
ifeq ($(origin NVCC),undefined)
NVCC := $(shell command -v nvcc 2>/dev/null)
endif
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
ifeq ($(origin CUDA_ARCH)$(if $(NVCC),y),undefinedy)
CUDA_ARCH := $(if $(shell $(NVCC) --list-gpu-arch 2>/dev/null | grep -x compute_70),70,75) 80 90
ifeq ($(firstword $(CUDA_ARCH)),75)
CUDA_ARCH_NOTE := note: this nvcc has no sm_70 (CUDA 13 dropped it): CUDA_ARCH = 75 80 90, no V100 (a CUDA 12 nvcc builds 70 80 90)
endif
endif
CUDA_ARCH ?= 70 80 90
ifeq ($(CUDA_ARCH),native)
NVCC_ARCH := -arch=native
else
NVCC_ARCH := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
endif
# the list for the backend's start-up message and the emulator's rule CC
# (cuda/emu/emu.cc): '_' for spaces, which nvcc's -D would split on
empty :=
CUDA_ARCH_DEF := -DCUDA_ARCH_LIST=\"$(subst $(empty) $(empty),_,$(strip $(CUDA_ARCH)))\"
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 $(NVCC_ARCH) $(CUDA_ARCH_DEF) -Werror all-warnings \
             -Xptxas -v,-warn-spills,-warn-lmem-usage,-warn-double-usage \
             -Xcompiler -Wall,-Wextra -Icuda
CUDA_DEPS := cuda/cuda_compat.h cuda/cost.h src/ops.h src/philox.h src/util.h src/device_peers.h $(wildcard cuda/*.cuh)
# mpi.h for nvcc and the emulator (g++): Open MPI's --showme, MPICH's -compile_info
MPI_INC  := $(filter -I%,$(shell $(CC) --showme:compile 2>/dev/null || $(CC) -compile_info 2>/dev/null)) \
            -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
NVCCFLAGS += $(MPI_INC)
# NCCL for the gradient allreduce: NCCL_HOME (a site's NCCL module), else
# beside CUDA, else the system's (Debian's libnccl-dev); `make NCCL=0` builds
# without.  Without NCCL, device=cuda sums through MPI on host copies, and
# allreduce=nccl is refused at start-up.
NCCL     ?= 1
NCCL_HOME ?= $(patsubst %/include/nccl.h,%,$(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)))
NCCL_LIB := $(dir $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so \
                                         /usr/lib/x86_64-linux-gnu/libnccl.so)))
ifneq ($(NVCC),)
CFLAGS   += -DHAVE_CUDA
# cuBLAS and cuBLASLt are opened on first use (cuda/blas_lazy.c), not linked:
# linked, libcublasLt cost every process 0.15 CPU s and 210 MB at start-up
CUDA_OBJ := build/cuda/ops_cuda.o build/cuda/blas_lazy.o
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
ifeq ($(NCCL)$(if $(wildcard $(NCCL_HOME)/include/nccl.h),y)$(if $(NCCL_LIB),y),1yy)
NVCCFLAGS += -DHAVE_NCCL -I$(NCCL_HOME)/include
LDLIBS   += -L$(NCCL_LIB) -Wl,-rpath,$(NCCL_LIB) -lnccl
else ifeq ($(NCCL),1)
# make CLUSTER=1: a multi-GPU build must not fall back to MPI on host
# copies unless asked (NCCL=0)
ifeq ($(CLUSTER),1)
$(error NCCL not found (nccl.h and libnccl under NCCL_HOME='$(NCCL_HOME)', beside CUDA or in /usr): load the NCCL module or set NCCL_HOME=DIR; NCCL=0 builds without it)
endif
NOTE_NCCL := note: NCCL not found (NCCL_HOME, beside CUDA, /usr): device=cuda sums gradients through MPI on host copies; make NCCL_HOME=DIR
endif
LDLIBS   += -lcudart -ldl -lstdc++
# rebuild the CUDA object when the nvcc command changes (CUDA_ARCH, NCCL_HOME)
NVCC_STAMP := build/cuda/nvcc-command
$(shell mkdir -p build/cuda; echo '$(NVCC) $(NVCCFLAGS)' | cmp -s - $(NVCC_STAMP) || echo '$(NVCC) $(NVCCFLAGS)' > $(NVCC_STAMP))
endif

# CUDA emulator for the tests (cuda/emu/): needs only the CUDA headers
EMU_HAVE := $(wildcard $(CUDA_HOME)/include/cublas_v2.h)
EMU_CXXFLAGS = -std=c++17 -DCUDA_EMULATION $(CUDA_ARCH_DEF) -Icuda -Ibuild/emu -I$(CUDA_HOME)/include $(MPI_INC) -O2 -g -Wall -Wextra -Werror -MMD -MP \
                $(shell PKG_CONFIG_PATH=$(OPENBLAS_PKG_PATH) pkg-config --cflags openblas 2>/dev/null)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# nvcc contracts a*b+c into one FMA by default (--fmad=true); g++ for x86-64
# without -mfma does not.  The *_fma test binaries build the emulated
# kernels (cuda/ops_cuda.cu, with its host code) contracted as nvcc would,
# so that "CUDA equals the CPU" is tested against what a GPU computes;
# `make EMU_FMA=1` builds the ordinary emulated binaries so as well.  They
# run only where this CPU has FMA (elsewhere the tests skip them in one line).
EMU_FMA_FLAGS := -mfma -ffp-contract=fast
EMU_KERNEL_FLAGS := $(if $(filter 1,$(EMU_FMA)),$(EMU_FMA_FLAGS))
# rebuild the emulated kernels when EMU_FMA changes
EMU_STAMP := build/emu/kernel-flags
ifneq ($(EMU_HAVE),)
$(shell mkdir -p build/emu; echo '$(EMU_KERNEL_FLAGS)' | cmp -s - $(EMU_STAMP) || echo '$(EMU_KERNEL_FLAGS)' > $(EMU_STAMP))
endif

# the library (src/) and the commands over it (src/cmd/: one file per
# command, main.c dispatching); docs/design.md has the layers
LIB_SRC  := $(wildcard src/*.c)
CMD_SRC  := $(wildcard src/cmd/*.c)
SRC      := $(LIB_SRC) $(CMD_SRC)
OBJ      := $(SRC:src/%.c=build/%.o)
CMD_OBJ  := $(CMD_SRC:src/%.c=build/%.o)
LIBOBJ   := $(LIB_SRC:src/%.c=build/%.o) $(CUDA_OBJ)
EMU_SRC  := emu cublas_emu cublaslt_emu nccl_emu ops_cuda
EMU_OBJ  := $(EMU_SRC:%=build/emu/%.o)
EMU_ASAN_OBJ := $(EMU_SRC:%=build/emu-asan/%.o)
EMU_TSAN_OBJ := $(EMU_SRC:%=build/emu-tsan/%.o)
EMU_FMA_OBJ := $(filter-out build/emu/ops_cuda.o,$(EMU_OBJ)) build/emu-fma/ops_cuda.o
EMU_LIBOBJ := $(filter-out build/backend.o,$(LIB_SRC:src/%.c=build/%.o)) build/emu/backend.o $(EMU_OBJ)
EMU_FMA_LIBOBJ := $(filter-out build/emu/ops_cuda.o,$(EMU_LIBOBJ)) build/emu-fma/ops_cuda.o
EMU_LDLIBS := $(BASE_LDLIBS) -lstdc++
# the host code test_cuda_kernels runs on both backends
KERNEL_TEST_OBJ := build/ops_cpu.o build/util.o build/attention.o build/config.o build/head_mask.o

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=bin/tests/%) bin/tests/blas_core bin/tests/fsfail_shim.so
# generated En-Fr-shaped corpora (tests/test_data_shared.sh, tests/scale/)
TEST_BIN += bin/tests/gen_corpus
ifneq ($(EMU_HAVE),)
TEST_BIN += bin/tests/test_cuda_kernels bin/tests/test_cuda_emu_planted \
            bin/tests/test_cuda_graphs_planted bin/tests/emu-planted-tsan \
            bin/tests/test_cuda_step bin/tests/emu-transformer bin/tests/test_cuda_costs bin/tests/gpu_model \
            bin/tests/emu-nccl-init bin/tests/gemm_peak
TEST_BIN += bin/tests/test_cuda_kernels_fma bin/tests/emu-step-fma bin/tests/emu-transformer-fma
# the ASan/UBSan and TSan kernel tests: two more compilations of ops_cuda.cu
# (about 2 CPU-minutes), built by make test-sanitizers only, since make test
# does not run them
SAN_TEST_BIN := bin/tests/test_cuda_kernels_asan bin/tests/test_cuda_kernels_tsan
endif

.PHONY: all test test-sanitizers test-slurm bench bench-ct2 clean venv venv-hf cuda-resources gpu-test gpu-bench gpu-model fuzz
all: bin/transformer

bin/tests/gen_corpus: tests/scale/gen_corpus.c $(LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $< $(LIBOBJ) -o $@ $(LDFLAGS) $(LDLIBS)

build/%.o: src/%.c | build
	$(call say,CC,$<)$(CC) $(CFLAGS) -c $< -o $@
# a command includes the library's headers from src/
build/cmd/%.o: src/cmd/%.c | build/cmd
	$(call say,CC,$<)$(CC) $(CFLAGS) -Isrc -c $< -o $@

bin/transformer: $(OBJ) $(CUDA_OBJ) | bin
	$(if $(NOTE_HDF5),@echo '$(NOTE_HDF5)')
	$(if $(NOTE_BLAS),@echo '$(NOTE_BLAS)')
	$(if $(NOTE_NCCL),@echo '$(NOTE_NCCL)')
	$(call say,LINK,$@)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# nvcc warnings are errors; ptxas reports per-kernel registers and shared
# memory, which must not spill and must stay near cuda/resource-usage.txt
build/cuda/ops_cuda.o: cuda/ops_cuda.cu $(CUDA_DEPS) cuda/resource-usage.txt cuda/resource_usage.sh $(NVCC_STAMP) | build/cuda
	$(if $(CUDA_ARCH_NOTE),@echo '$(CUDA_ARCH_NOTE)')
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -c $< -o $@.tmp 2> build/cuda/ptxas.log || { cat build/cuda/ptxas.log; rm -f $@.tmp; exit 1; }
	$(Q)cuda/resource_usage.sh check build/cuda/ptxas.log cuda/resource-usage.txt
	$(Q)mv $@.tmp $@

build/cuda/blas_lazy.o: cuda/blas_lazy.c cuda/blas_lazy.h | build/cuda
	$(call say,CC,$<)$(CC) $(CFLAGS) -Isrc -I$(CUDA_HOME)/include -c $< -o $@

# records the current per-kernel use (after a deliberate change, e.g. a new
# kernel): compiles without the check, which would refuse the new table
cuda-resources: cuda/ops_cuda.cu $(CUDA_DEPS) | build/cuda
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -c $< -o build/cuda/resources.o 2> build/cuda/ptxas.log || { cat build/cuda/ptxas.log; exit 1; }
	$(Q)rm -f build/cuda/resources.o
	$(call say,GEN,cuda/resource-usage.txt)cuda/resource_usage.sh table build/cuda/ptxas.log > cuda/resource-usage.txt

build/emu/ops_cuda.o: cuda/ops_cuda.cu $(CUDA_DEPS) $(EMU_STAMP) | build/emu
	$(call say,CXX,$< (emulated))g++ -x c++ $(EMU_CXXFLAGS) $(EMU_KERNEL_FLAGS) -c $< -o $@
build/emu-fma/ops_cuda.o: cuda/ops_cuda.cu $(CUDA_DEPS) | build/emu-fma
	$(call say,CXX,$< (emulated, fma))g++ -x c++ $(EMU_CXXFLAGS) $(EMU_FMA_FLAGS) -c $< -o $@
# rule REGISTERS of the emulator: the per-kernel registers, compiled in
build/emu/resource-usage.inc: cuda/resource-usage.txt | build/emu
	$(call say,GEN,$@)sed 's/.*/"&\\n"/' $< > $@
build/emu/emu.o build/emu-asan/emu.o build/emu-tsan/emu.o: build/emu/resource-usage.inc
build/emu/%.o: cuda/emu/%.cc | build/emu
	$(call say,CXX,$<)g++ $(EMU_CXXFLAGS) -c $< -o $@
build/emu-asan/ops_cuda.o: cuda/ops_cuda.cu $(CUDA_DEPS) | build/emu-asan
	$(call say,CXX,$< (emulated, asan))g++ -x c++ $(EMU_CXXFLAGS) $(SAN) -O1 -c $< -o $@
build/emu-asan/%.o: cuda/emu/%.cc | build/emu-asan
	$(call say,CXX,$< (asan))g++ $(EMU_CXXFLAGS) $(SAN) -O1 -c $< -o $@
build/emu-tsan/ops_cuda.o: cuda/ops_cuda.cu $(CUDA_DEPS) | build/emu-tsan
	$(call say,CXX,$< (emulated, tsan))g++ -x c++ $(EMU_CXXFLAGS) -fsanitize=thread -O1 -c $< -o $@
build/emu-tsan/%.o: cuda/emu/%.cc | build/emu-tsan
	$(call say,CXX,$< (tsan))g++ $(EMU_CXXFLAGS) -fsanitize=thread -O1 -c $< -o $@
build/emu/backend.o: src/backend.c | build/emu
	$(call say,CC,$< (emulated CUDA))$(CC) $(CFLAGS) -DHAVE_CUDA -c $< -o $@

bin/tests/test_cuda_kernels: tests/cuda/test_cuda_kernels.c $(KERNEL_TEST_OBJ) $(EMU_OBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) $(CUDA_ARCH_DEF) -Isrc -I$(CUDA_HOME)/include $< $(KERNEL_TEST_OBJ) $(EMU_OBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)
bin/tests/test_cuda_kernels_asan: tests/cuda/test_cuda_kernels.c $(KERNEL_TEST_OBJ) $(EMU_ASAN_OBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) $(CUDA_ARCH_DEF) $(SAN) -Isrc -I$(CUDA_HOME)/include $< $(KERNEL_TEST_OBJ) $(EMU_ASAN_OBJ) -o $@ $(LDFLAGS) $(SAN) $(EMU_LDLIBS)
bin/tests/test_cuda_kernels_tsan: tests/cuda/test_cuda_kernels.c $(KERNEL_TEST_OBJ) $(EMU_TSAN_OBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) $(CUDA_ARCH_DEF) -fsanitize=thread -DCUDA_TEST_TSAN -Isrc -I$(CUDA_HOME)/include $< $(KERNEL_TEST_OBJ) $(EMU_TSAN_OBJ) -o $@ $(LDFLAGS) -fsanitize=thread $(EMU_LDLIBS)
bin/tests/test_cuda_kernels_fma: tests/cuda/test_cuda_kernels.c $(KERNEL_TEST_OBJ) $(EMU_FMA_OBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) $(CUDA_ARCH_DEF) -DCUDA_TEST_FMA -Isrc -I$(CUDA_HOME)/include $< $(KERNEL_TEST_OBJ) $(EMU_FMA_OBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)
bin/tests/emu-step-fma: tests/cuda/test_cuda_step.c $(EMU_FMA_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $< $(EMU_FMA_LIBOBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)
bin/tests/emu-transformer-fma: $(CMD_OBJ) $(EMU_FMA_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(LDFLAGS) $^ -o $@ $(EMU_LDLIBS)
bin/tests/emu-planted-tsan: tests/cuda/test_cuda_emu_planted.cu build/emu-tsan/emu.o | bin/tests
	$(call say,LINK,$@)g++ -x c++ $(filter-out -MMD -MP,$(EMU_CXXFLAGS)) -fsanitize=thread -O1 $< -x none build/emu-tsan/emu.o -o $@
# gemm_peak on the emulator (its plumbing, at a small n: tests/test_gpu_kit.sh)
bin/tests/gemm_peak: tests/gpu/gemm_peak.cu build/emu/emu.o build/emu/cublas_emu.o | bin/tests
	$(call say,LINK,$@)g++ -x c++ $(filter-out -MMD -MP,$(EMU_CXXFLAGS)) $< -x none build/emu/emu.o build/emu/cublas_emu.o -o $@ $(EMU_LDLIBS)
bin/tests/test_cuda_emu_planted: tests/cuda/test_cuda_emu_planted.cu build/emu/emu.o | bin/tests
	$(call say,LINK,$@)g++ -x c++ $(filter-out -MMD -MP,$(EMU_CXXFLAGS)) $< -x none build/emu/emu.o -o $@
bin/tests/test_cuda_graphs_planted: tests/cuda/test_cuda_graphs_planted.cu build/emu/emu.o | bin/tests
	$(call say,LINK,$@)g++ -x c++ $(filter-out -MMD -MP,$(EMU_CXXFLAGS)) $< -x none build/emu/emu.o -o $@
bin/tests/test_cuda_step: tests/cuda/test_cuda_step.c $(EMU_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $< $(EMU_LIBOBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)
bin/tests/emu-nccl-init: tests/cuda/emu_nccl_init.c build/emu/emu.o build/emu/nccl_emu.o | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -I$(CUDA_HOME)/include $< build/emu/emu.o build/emu/nccl_emu.o -o $@ $(LDFLAGS) $(EMU_LDLIBS)
bin/tests/emu-transformer: $(CMD_OBJ) $(EMU_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(LDFLAGS) $^ -o $@ $(EMU_LDLIBS)
bin/tests/test_cuda_costs: tests/cuda/test_cuda_costs.c cuda/cost.h $(EMU_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $< $(EMU_LIBOBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)
GPU_MODEL_SRC = tests/gpu/gpu_model.c tests/gpu/trace.c tests/gpu/model_range.c tests/gpu/fit.c tests/gpu/anchor.c tests/gpu/roofline.c \
                tests/gpu/call_timing.c tests/gpu/gemm_sweep.c
bin/tests/gpu_model: $(GPU_MODEL_SRC) tests/gpu/gpu_model.h tests/gpu/roofline.h cuda/cost.h $(EMU_LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $(GPU_MODEL_SRC) $(EMU_LIBOBJ) -o $@ $(LDFLAGS) $(EMU_LDLIBS)

# the OpenBLAS kernel in use (tests/check.sh reruns training tests under another)
bin/tests/blas_core: tests/blas_core.c | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BASE_LDLIBS)

bin/tests/fsfail_shim.so: tests/fsfail_shim.c | bin/tests
	$(call say,LINK,$@)gcc -std=c11 -Wall -Wextra -O2 -shared -fPIC $< -o $@ -ldl

bin/tests/%: tests/%.c $(LIBOBJ) | bin/tests
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $< $(LIBOBJ) -o $@ $(LDFLAGS) $(LDLIBS)

# real-GPU runs (need nvcc and a GPU): the op and step tests built against
# the real backend, and the throughput benchmark
GPU_BIN := bin/gpu/test_cuda_kernels bin/gpu/test_cuda_step bin/gpu/gemm_peak bin/gpu/gpu_model
bin/gpu/test_cuda_%: tests/cuda/test_cuda_%.c $(LIBOBJ) | bin/gpu
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc -I$(CUDA_HOME)/include $< $(LIBOBJ) -o $@ $(LDFLAGS) $(LDLIBS)
# the cost model's driver on the real backend: --time-calls on a GPU
bin/gpu/gpu_model: $(GPU_MODEL_SRC) tests/gpu/gpu_model.h tests/gpu/roofline.h cuda/cost.h $(LIBOBJ) | bin/gpu
	$(call say,LINK,$@)$(CC) $(CFLAGS) -Isrc $(GPU_MODEL_SRC) $(LIBOBJ) -o $@ $(LDFLAGS) $(LDLIBS)
bin/gpu/gemm_peak: tests/gpu/gemm_peak.cu | bin/gpu
	$(call say,LINK,$@)$(NVCC) -O2 $(NVCC_ARCH) $< -o $@ -lcublas
gpu-test: all $(GPU_BIN)
	@[ -n "$(NVCC)" ] || { echo "error: gpu-test: nvcc not found"; exit 2; }
	$(Q)$(SCRIPT) tests/gpu/gpu_test.sh
gpu-bench: all $(GPU_BIN)
	@[ -n "$(NVCC)" ] || { echo "error: gpu-bench: nvcc not found"; exit 2; }
	$(Q)$(SCRIPT) tests/gpu/gpu_bench.sh
# the GPU cost model of a training step, run here without a GPU (docs/gpu-model.md)
gpu-model: bin/tests/gpu_model
	$(Q)$(SCRIPT) tests/gpu/gpu_model.sh
# GPU acceptance (docs/gpu-accept.md) into GPU_ACCEPT_OUT, in device calls of
# at most 9 minutes: call 1 (build, the multi-rank step vs the CPU, speed)
# unless CALL=N; STAGE=train,mpi runs stages by name; it builds by itself.
# gpu-plan prints the calls, their budgets and the device tool's arguments.
.PHONY: gpu-accept gpu-plan gpu-kit-plan
GPU_ACCEPT_OUT ?= out/gpu-accept
gpu-accept:
	$(Q)CALL='$(CALL)' $(SCRIPT) tests/gpu/accept.sh $(GPU_ACCEPT_OUT)
gpu-plan:
	$(Q)$(SCRIPT) tests/gpu/accept.sh --plan
# the measurement kit's device calls (issue 32, docs/gpu-accept.md "The kit")
gpu-kit-plan:
	$(Q)$(SCRIPT) bash tests/gpu/kit.sh --plan

build bin bin/tests bin/gpu bin/fuzz build/cmd build/cuda build/emu build/emu-asan build/emu-tsan build/emu-fma build/fuzz build/fuzz/cmd:
	$(Q)mkdir -p $@

tests: $(TEST_BIN) $(SAN_TEST_BIN)

# the compute capabilities the CUDA code is built for (tests/test_fp16_learn.sh)
.PHONY: print-cuda-arch
print-cuda-arch:
	@echo $(CUDA_ARCH)

test: all $(TEST_BIN)
	$(Q)$(SCRIPT) tests/run_all.sh
# the kernel tests built with ASan/UBSan and TSan (CI runs them after test)
test-sanitizers: all $(TEST_BIN) $(SAN_TEST_BIN)
	$(Q)SANITIZERS=only $(SCRIPT) tests/run_all.sh

# the job scripts (jobs/) on a real single-node Slurm started for the test
# (root; installs Debian's slurm packages if missing); a few minutes
# fuzz targets (tests/fuzz/): libFuzzer with ASan and UBSan, the readers
# built CPU-only with clang.  `make fuzz` runs each FUZZ_SECONDS (default
# 60) from the committed seed corpus; tests/fuzz/run.sh prints the table.
FUZZ_TARGETS := config sentences translate_input dataset checkpoint
FUZZ_BIN := $(FUZZ_TARGETS:%=bin/fuzz/fuzz_%)
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fopenmp \
              -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed \
              $(HDF5_CFLAGS) $(shell PKG_CONFIG_PATH=$(OPENBLAS_PKG_PATH) pkg-config --cflags openblas 2>/dev/null)
FUZZ_CC  = OMPI_CC=clang MPICH_CC=clang $(CC)
FUZZ_OBJ := $(filter-out build/fuzz/cmd/main.o,$(SRC:src/%.c=build/fuzz/%.o))
.SECONDARY: $(FUZZ_OBJ)
build/fuzz/%.o: src/%.c | build/fuzz
	$(call say,CC,$< (fuzz))$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
build/fuzz/cmd/%.o: src/cmd/%.c | build/fuzz/cmd
	$(call say,CC,$< (fuzz))$(FUZZ_CC) $(FUZZ_CFLAGS) -Isrc -c $< -o $@
# a target that includes a source file (for its static functions) links
# everything but that file's object
bin/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_OBJ) | bin/fuzz
	$(call say,LINK,$@)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Isrc $< \
	    $(filter-out $(patsubst %,build/fuzz/%.o,$(shell sed -n 's|^#include "../../src/\(.*\)\.c"|\1|p' $<)),$(FUZZ_OBJ)) \
	    -o $@ $(BASE_LDLIBS) -lstdc++
fuzz: $(FUZZ_BIN) all
	$(Q)$(SCRIPT) tests/fuzz/run.sh $(FUZZ_SECONDS)

test-slurm: all
	$(Q)$(SCRIPT) tests/slurm/test_slurm.sh
	$(Q)$(SCRIPT) tests/slurm/test_two_node.sh

bench: all bin/bench/gemm_peak
	$(Q)$(SCRIPT) tests/bench/run.sh
# decoding speed against CTranslate2 (issue 45): CKPT=FILE, optional DATA,
# SPLIT, SENTENCES, REPEATS, THREADS, BEAMS (tests/bench/decode_ct2.sh)
bench-ct2: all
	$(Q)$(SCRIPT) tests/bench/decode_ct2.sh

clean:
	rm -rf build bin

# Python environment of analysis/ (pinned in analysis/requirements.txt)
venv:
	python3 -m venv .venv && .venv/bin/pip install -r analysis/requirements.txt

# the Hugging Face export/import (docs/hf-export.md): torch from Debian's
# python3-torch (apt), the rest pinned in analysis/requirements-hf.txt
venv-hf:
	/usr/bin/python3 -m venv --system-site-packages .venv-hf && .venv-hf/bin/pip install -r analysis/requirements-hf.txt

-include $(OBJ:.o=.d) $(EMU_OBJ:.o=.d) $(EMU_ASAN_OBJ:.o=.d) $(EMU_TSAN_OBJ:.o=.d) build/emu-fma/ops_cuda.d \
         build/emu/backend.d

bin/bench/gemm_peak: tests/bench/gemm_peak.c | bin/bench
	$(call say,LINK,$@)$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS)

bin/bench:
	$(Q)mkdir -p $@
