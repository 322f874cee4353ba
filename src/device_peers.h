/* Which ranks of a communicator use the same device as this one: on the
 * same node (MPI_Comm_split_type shared) with the same device UUID (not
 * the PCI bus id: MIG instances of one GPU share the bus id but are
 * separate devices).  Ranks that share a GPU share its memory (max_tokens
 * = 0 divides it, auto_tokens.c) and cannot be ranks of one NCCL
 * communicator (the CUDA backend's allreduce then takes MPI, comm.cuh).
 * Header-only: the CUDA backend's test binaries link no dist.o. */
#ifndef DEVICE_PEERS_H
#define DEVICE_PEERS_H

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int count;         /* ranks of comm on this device, this one included */
    int index;         /* this rank's place among them, by rank in comm */
    int first_other;   /* the lowest rank of comm among the others; -1: none */
    int any_shared;    /* 1 where some ranks of comm share a device: the same on every rank */
} DevicePeers;

/* Collective over comm.  uuid: this rank's device, or NULL where unknown
 * (then it shares with nobody).  same: if not NULL, set to a communicator
 * of the ranks on this device (ordered as in comm), which the caller frees. */
static inline DevicePeers device_peers(MPI_Comm comm, const unsigned char *uuid, MPI_Comm *same)
{
    struct device_peer_key { unsigned char uuid[16]; int known, rank; } me, *all;
    DevicePeers p = { 0, 0, -1, 0 };
    MPI_Comm node;
    int rank, n, color;
    memset(&me, 0, sizeof me);
    MPI_Comm_rank(comm, &rank);
    if (uuid) memcpy(me.uuid, uuid, 16);
    me.known = uuid != NULL;
    me.rank = rank;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &n);
    MPI_Comm_rank(node, &color);   /* where nobody shares: a group of its own */
    all = (struct device_peer_key *)malloc(sizeof *all * (size_t)n);
    if (!all) MPI_Abort(comm, 1);
    MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, node);
    for (int r = n - 1; r >= 0; r--) {
        if (!me.known || !all[r].known || memcmp(all[r].uuid, me.uuid, 16)) continue;
        p.count++;
        color = r;   /* the first node-local rank on the device names the group */
        if (all[r].rank < rank) p.index++;
        if (all[r].rank != rank && (p.first_other < 0 || all[r].rank < p.first_other)) p.first_other = all[r].rank;
    }
    if (!me.known) p.count = 1;
    free(all);
    if (same) MPI_Comm_split(node, color, rank, same);
    MPI_Comm_free(&node);
    int mine = p.count > 1;
    MPI_Allreduce(&mine, &p.any_shared, 1, MPI_INT, MPI_MAX, comm);
    return p;
}

#endif
