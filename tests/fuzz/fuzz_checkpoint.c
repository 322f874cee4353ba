/* Fuzz target: checkpoint files (docs/checkpoint.md) -> the checkpoint
 * reader as eval/translate/attention open a model, as resume reads the run
 * state and the Adam moments, and as `average` combines two.  The seed
 * corpus holds small valid checkpoints; libFuzzer mutates their bytes.  A
 * file is loaded whole with finite values where checksums say so, or
 * refused in one line (exit status 2, never a crash). */
#include "fuzz_common.h"
#include "../../src/checkpoint.h"
#include "../../src/cmd/average.h"
#include "../../src/ops.h"

static Backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_mpi();
    be = backend_cpu_create(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".h5");
    Config c;
    CkptState st;
    Model m;
    memset(&m, 0, sizeof m);
    if (checkpoint_open_model(path, &c, &st, &m, be) == 0) {
        /* resume's view: the run state and both Adam moments */
        size_t n = m.pt.total;
        float *host = malloc(sizeof(float) * 3 * (n ? n : 1));
        if (!host) abort();
        checkpoint_read_tensors(path, &m.pt, host, host + n, host + 2 * n);
        free(host);
        model_free(&m);
        char out[160];
        snprintf(out, sizeof out, "/dev/shm/transformer-fuzz-%d-avg.h5", (int)getpid());
        char *argv[] = { "transformer", "average", "--output", out, (char *)path, (char *)path, NULL };
        if (cmd_average(6, argv) == 0) unlink(out);
    }
    fuzz_done();
    return 0;
}
