/* Shared by the fuzz targets (tests/fuzz/, `make fuzz`): libFuzzer hands a
 * byte string; the readers under test take file names, so the bytes go to a
 * file in /dev/shm first (one per process: libFuzzer's -jobs/-fork modes run
 * several).  MPI is initialised once, as a 1-rank job, since the readers
 * live in an MPI program. */
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

static void fuzz_init_mpi(void)
{
    int argc = 0;
    char **argv = NULL;
    int inited;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(&argc, &argv);
    h5io_init();
    atexit((void (*)(void))MPI_Finalize);
}

#endif
