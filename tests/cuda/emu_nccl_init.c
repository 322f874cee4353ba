/* The emulated ncclCommInitRank with every rank on device DEV (argument;
 * default: its own rank's device): prints what it returned; exit 0 when
 * the communicator was made, 3 for ncclInvalidUsage, 1 otherwise.  For
 * tests/test_cuda_shared_device.sh (the strict rule NCCL_SAMEDEV). */
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dev = argc > 1 ? atoi(argv[1]) : rank;
    if (cudaSetDevice(dev) != cudaSuccess) {
        fprintf(stderr, "error: rank %d: no device %d\n", rank, dev);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    printf("rank %d on device %d: ncclCommInitRank: %s\n", rank, dev, ncclGetErrorString(r));
    if (r == ncclSuccess) ncclCommDestroy(comm);
    MPI_Finalize();
    return r == ncclSuccess ? 0 : r == ncclInvalidUsage ? 3 : 1;
}
