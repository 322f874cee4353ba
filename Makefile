# bin/transformer: C11 host code (src/), optional CUDA backend (cuda/).
# `make` builds; `make test` runs every test; `make bench` the benchmarks.
CC       := mpicc
OPENBLAS_PC := /usr/lib/x86_64-linux-gnu/openblas-openmp/pkgconfig
PKGS     := hdf5-openmpi
ARCH     ?= -march=x86-64-v3
CFLAGS   ?= -O3 $(ARCH) -fno-math-errno
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -MMD -MP \
            $(shell pkg-config --cflags $(PKGS)) \
            $(shell PKG_CONFIG_PATH=$(OPENBLAS_PC) pkg-config --cflags openblas)
OPENBLAS_LIBDIR := $(shell PKG_CONFIG_PATH=$(OPENBLAS_PC) pkg-config --variable=libdir openblas)
LDLIBS   += $(shell pkg-config --libs $(PKGS)) \
            -L$(OPENBLAS_LIBDIR) -Wl,-rpath,$(OPENBLAS_LIBDIR) -lopenblas -lm
LDFLAGS  += -fopenmp

SRC      := $(wildcard src/*.c)
OBJ      := $(SRC:src/%.c=build/%.o)
LIBOBJ   := $(filter-out build/main.o,$(OBJ))

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=bin/tests/%)

.PHONY: all test bench clean
all: bin/transformer

build/%.o: src/%.c | build
	$(CC) $(CFLAGS) -c $< -o $@

bin/transformer: $(OBJ) | bin
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

bin/tests/%: tests/%.c $(LIBOBJ) | bin/tests
	$(CC) $(CFLAGS) -Isrc $< $(LIBOBJ) -o $@ $(LDFLAGS) $(LDLIBS)

build bin bin/tests:
	mkdir -p $@

tests: $(TEST_BIN)

test: all $(TEST_BIN)
	tests/run_all.sh

bench: all bin/bench/gemm_peak
	tests/bench/run.sh

clean:
	rm -rf build bin

-include $(OBJ:.o=.d)

bin/bench/gemm_peak: tests/bench/gemm_peak.c | bin/bench
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS)

bin/bench:
	mkdir -p $@
