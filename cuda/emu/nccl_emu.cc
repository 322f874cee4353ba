/* NCCL for the CUDA emulator: the calls the backend uses, compiled against
 * the real nccl.h, mapped onto MPI.  A communicator is MPI_COMM_WORLD
 * checked against the (nranks, rank) the caller passes; the unique id must
 * be the same on every rank (it is broadcast over MPI by the backend, and
 * the emulator checks that it arrived).  Buffers must be device memory. */
#include "emu.h"

#include <mpi.h>
#include <nccl.h>

#include <cstdio>

struct ncclComm {
    int nranks, rank;
};

static const char ID_MAGIC[] = "cuda-emu nccl unique id";

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC))
        cuda_emu::fail("ncclCommInitRank: rank %d holds a unique id that ncclGetUniqueId did not make (not broadcast?)", rank);
    int size, me;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != nranks || me != rank)
        cuda_emu::fail("ncclCommInitRank(nranks %d, rank %d) on MPI rank %d of %d", nranks, rank, me, size);
    *comm = new ncclComm{ nranks, rank };
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    if (!comm) return ncclInvalidArgument;
    if (dt != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;   /* all the backend uses */
    if (!cuda_emu::is_device_range(recv, count * 4) || !cuda_emu::is_device_range(send, count * 4))
        cuda_emu::fail("ncclAllReduce: buffer %p (+%zu floats) is not device memory", recv, count);
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : "emulated NCCL error";
}
