/* Continuous batching for one data-parallel replica (scheduler.c); replicas.c runs the
 * replicas' schedulers together. */
#ifndef LOOM_SERVE_SCHEDULER_H
#define LOOM_SERVE_SCHEDULER_H
#include "serve/server.h"
#include "serve/steps.h"

/* Queues r and its other choices on one replica's scheduler (one more reference to each is
 * taken; the scheduler may hold the others back, see scheduler.c); returns 0, or an HTTP status
 * with msg filled: 503 when the queue has no room for every choice or the server is draining or
 * failed. Caller holds the lock. */
int sched_submit(sched *s, request *r, char *msg, size_t cap);
/* Adds one replica's gauges (requests running and waiting, slots and KV blocks in use) as they
 * are now to m's. Lock held. */
void sched_gauges(const sched *s, metrics *m);

/* The scheduler of replica `replica`, building its steps in st; e is rank 0's engine, whose KV
 * pool every replica's has the size of. */
sched *sched_new(server *srv, const loom_engine *e, step *st, int replica, loom_err *err);
void sched_free(sched *s);
/* The next step, in three parts (scheduler.c): lock held, sched_begin picks its decoding
 * requests; lock not held, sched_propose has the speculator propose their tokens; lock held
 * again, sched_build adds their tokens, prompt chunks and admissions, and says whether the step
 * has anything for the replica's ranks (tokens or sequence changes). */
void sched_begin(sched *s);
void sched_propose(sched *s);
bool sched_build(sched *s);
/* After the step ran: samples its logit rows (the replica's, [n_logits][vocab]) into its
 * requests and finishes those that are done. Takes the lock. */
void sched_take(sched *s, const float *logits);
/* The engine failed: every request, running or waiting, fails with why. Takes the lock. */
void sched_fail_all(sched *s, const char *why);
/* Lock held: vLLM's measure of a replica's load (waiting x 4 + running; held-back choices wait
 * too), and the prompt tokens of
 * r its KV cache holds in whole blocks. */
int sched_load(const sched *s);
/* The digest of the replica's KV bookkeeping as rank 0's mirror holds it (loom_engine_kv_digest). */
unsigned long long sched_kv_digest(const sched *s);
int sched_cached_tokens(sched *s, const request *r);

#endif
