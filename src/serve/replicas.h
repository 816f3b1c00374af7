/* The data-parallel replicas seen from rank 0 (replicas.c): the balancer that gives each request
 * to one replica's scheduler, and the loop that runs their steps together. */
#ifndef LOOM_SERVE_REPLICAS_H
#define LOOM_SERVE_REPLICAS_H
#include "serve/server.h"
#include "serve/steps.h"

/* Queues r on the replica `pin` names (-1: none; the X-data-parallel-rank header), else (with
 * prefix routing) on the one holding the longest cached prefix of its prompt among those within
 * PREFIX_SLACK of the least load, else on the least loaded (vLLM's waiting x 4 + running); a
 * request never moves. 400 for a pin out of range, else as sched_submit. Lock held. */
int replicas_submit(server *srv, request *r, int pin, char *msg, size_t cap);
/* m's gauges over every replica. Lock held. */
void replicas_gauges(server *srv, metrics *m);

/* Runs rounds of every replica's step until *stop_signal is set and every request
 * has finished (0), or the engine fails (-1: every open request fails with err's message). Then
 * tells the other ranks to stop. */
int replicas_loop(server *srv, loom_engine *e, loom_comm *c, step_round *round, volatile int *stop_signal,
                  loom_err *err);

#endif
