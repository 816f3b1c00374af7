/* The MPI backend: ranks started by mpirun, possibly on several machines. */
#ifndef LOOM_COMM_MPI_H
#define LOOM_COMM_MPI_H
#include "comm/comm.h"

/* Initialises MPI, checks tp x dp x pp (comm_layout's; dp, pp 0: 1) against the job's size
 * (tp 0: the job's size / (dp x pp)), runs fn as this process's rank, finalises. A rank whose
 * fn fails, or whose collective passes timeout_s, aborts the whole job with a message naming it
 * with its replica and stage. Returns fn's result. */
int comm_mpi_run(int tp, int dp, int pp, double timeout_s, bool progress_thread, loom_rank_fn fn, void *arg,
                 loom_err *err);

/* This process's rank among the job's ranks on its machine, and their count (a collective:
 * every rank calls it, inside comm_mpi_run). */
void comm_mpi_node_rank(int *rank, int *size);

#endif
