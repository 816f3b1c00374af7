/* The data-parallel replicas as rank 0 sees them (-dp; one replica without it): a scheduler
 * each, the balancer that gives every request to one replica for good, and the loop that runs
 * their steps together, one round a step (steps.c).
 *
 * The balancer follows vLLM's front end: a request goes to the replica with the least load
 * (waiting x 4 + running), or to the one the X-data-parallel-rank header names. With
 * --data-parallel-routing prefix, a replica whose KV cache holds a cached prefix of the prompt
 * is preferred, since its prefill then skips those tokens; only among replicas whose load is
 * within PREFIX_SLACK of the least, so that a prefix every request shares (a system prompt)
 * cannot pull them all onto one replica. It is not the default: on a multi-turn chat it cached
 * 6-11% more prompt tokens but gave 20% less throughput, the replicas' loads drifting apart
 * (benches/RESULTS.md). */
#include "serve/replicas.h"

#include <stdio.h>
#include <time.h>

#include "serve/clock.h"
#include "serve/scheduler.h"

/* How much more loaded (in sched_load's units: one waiting request is 4) a replica holding a
 * cached prefix may be and still be chosen for it. */
#define PREFIX_SLACK 4

int replicas_submit(server *srv, request *r, int pin, char *msg, size_t cap) {
    if (pin >= srv->dp || pin < -1)
        return snprintf(msg, cap, "X-data-parallel-rank: not a replica of this server (0..%d)", srv->dp - 1), 400;
    int best = pin;
    bool by_prefix = false;
    if (best < 0) {
        int least = 0;
        for (int d = 1; d < srv->dp; d++)
            if (sched_load(srv->sch[d]) < sched_load(srv->sch[least])) least = d;
        best = least;
        int most = 0;
        for (int d = 0; d < srv->dp && srv->dp > 1 && srv->o->prefix_routing; d++) {
            if (sched_load(srv->sch[d]) > sched_load(srv->sch[least]) + PREFIX_SLACK) continue;
            int cached = sched_cached_tokens(srv->sch[d], r);
            if (cached > most) most = cached, best = d;
        }
        by_prefix = best != least;
    }
    int status = sched_submit(srv->sch[best], r, msg, cap);
    if (!status && best < METRICS_MAX_REPLICAS) {
        srv->met.routed[best]++;
        srv->met.routed_prefix += by_prefix;
    }
    return status;
}

void replicas_gauges(server *srv, metrics *m) {
    m->running = m->waiting = m->slots_used = m->blocks_used = m->blocks_total = 0;
    for (int d = 0; d < srv->dp; d++) sched_gauges(srv->sch[d], m);
}

/* Sleeps until a request comes or 100 ms pass. Lock held (and held again on return). */
static void wait_for_work(server *srv) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&srv->work, &srv->lock, &until);
}

int replicas_loop(server *srv, loom_engine *e, loom_comm *c, step_round *round, volatile int *stop_signal,
                  loom_err *err) {
    double last_step = serve_now();
    for (;;) {
        pthread_mutex_lock(&srv->lock);
        if (*stop_signal) srv->draining = true;
        bool busy = false;
        for (int d = 0; d < srv->dp; d++) sched_begin(srv->sch[d]);
        if (srv->o->speculator) { /* a draft model's passes, without the lock */
            pthread_mutex_unlock(&srv->lock);
            for (int d = 0; d < srv->dp; d++) sched_propose(srv->sch[d]);
            pthread_mutex_lock(&srv->lock);
        }
        for (int d = 0; d < srv->dp; d++) busy |= sched_build(srv->sch[d]);
        if (!busy && srv->draining) {
            pthread_mutex_unlock(&srv->lock);
            break;
        }
        if (!busy) { /* sleep until a request comes, but send a round every second (steps.c) */
            wait_for_work(srv);
            pthread_mutex_unlock(&srv->lock);
            if (serve_now() - last_step < 1.0) continue;
        } else {
            pthread_mutex_unlock(&srv->lock);
        }
        last_step = serve_now();
        if (step_round_run(round, e, c, last_step, err)) {
            for (int d = 0; d < srv->dp; d++) sched_fail_all(srv->sch[d], err->msg);
            return -1;
        }
        for (int d = 0; d < srv->dp; d++) step_clear(&round->of[d]);
        for (int d = 0; d < srv->dp; d++) sched_take(srv->sch[d], round->logits[d]);
    }
    for (int d = 0; d < srv->dp; d++) {
        step_clear(&round->of[d]);
        round->of[d].cmd = STEP_STOP;
    }
    return step_round_run(round, e, c, serve_now(), err);
}
