/* Shared by the fuzz targets (tests/fuzz/, `make fuzz`): libFuzzer hands a
 * byte string; the readers under test take file names, so the bytes go to a
 * file in /dev/shm first (one per process: libFuzzer's -jobs/-fork modes run
 * several).  MPI is initialised once, as a 1-rank job, since the readers
 * live in an MPI program.
 *
 * Each input must leave libhdf5 as it found it: a reader that leaks an
 * HDF5 handle on some path would leave the file open, and the next input,
 * written to the same path, would be read through the stale open file's
 * metadata cache: a crash that does not reproduce alone.  fuzz_done()
 * turns such a leak into a finding of its own, at the input that leaks.
 * HDF5's free lists recycle its blocks without going through malloc, which
 * hides the library's use-after-frees from ASan until a later input trips
 * over the damage; they are limited to nothing, so a library bug is
 * reported at the input that causes it (tests/fuzz/run.sh replays each
 * finding alone and classifies it by where it crashes). */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/h5io.h"

static char fuzz_path[128];

/* the bytes as the file fuzz_path (suffix: ".h5", ".txt", ...) */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    snprintf(fuzz_path, sizeof fuzz_path, "/dev/shm/transformer-fuzz-%d%s", (int)getpid(), suffix);
    FILE *f = fopen(fuzz_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return fuzz_path;
}

/* after each input: no HDF5 file, group, dataset or attribute left open */
static void fuzz_done(void)
{
    ssize_t open_objects = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open_objects != 0) {
        fprintf(stderr, "fuzz: %zd HDF5 object(s) left open after the input (a leaked handle)\n", open_objects);
        abort();
    }
}

static void fuzz_init_mpi(void)
{
    int argc = 0;
    char **argv = NULL;
    int inited;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(&argc, &argv);
    h5io_init();
    H5set_free_list_limits(0, 0, 0, 0, 0, 0);
    atexit((void (*)(void))MPI_Finalize);
}

#endif
