/* Continuous batching over one engine (see scheduler.c). */
#ifndef LOOM_SERVE_SCHEDULER_H
#define LOOM_SERVE_SCHEDULER_H
#include "serve/serve.h"

sched *sched_new(server *srv, loom_engine *e, loom_comm *comm, loom_err *err);
void sched_free(sched *s);
/* Runs steps until *stop_signal is set and every request has finished (0), or the engine
 * fails (-1: every open request fails with err's message). Then tells the other ranks to stop. */
int sched_loop(sched *s, volatile int *stop_signal, loom_err *err);
/* Monotonic seconds. */
double serve_now(void);

#endif
