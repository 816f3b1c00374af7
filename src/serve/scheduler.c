/* Continuous batching. Requests wait in a FIFO queue for one of --max-num-seqs KV slots. Each
 * engine step first takes the next token of every decoding sequence, then fills the rest of
 * the --max-num-batched-tokens budget with chunks of prompts, oldest first (chunked prefill),
 * so a long prompt never stalls the sequences already generating. Requests join and leave
 * between steps: a slot is freed (and its KV cache forgotten on every rank) when its request
 * finishes, hits the context limit or its client leaves.
 *
 * The scheduler thread holds the server lock while it reads and updates requests, and lets
 * it go while the engine runs, so HTTP threads queue and stream meanwhile. Everything a step
 * needs is allocated here once; requests allocate their own output as it grows. */
#include "serve/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/steps.h"
#include "util/alloc.h"
#include "util/err.h"

struct sched {
    server *srv;
    loom_engine *e;
    loom_comm *comm;
    int max_seqs, max_tokens, max_queue;
    request **queue; /* waiting, FIFO ring */
    int q_head, q_len;
    request **running; /* in admission order (prefill priority) */
    int n_running;
    bool *slot_used;
    step st;
    request **row_req; /* [max_seqs] the request each logit row samples for */
    float *logprob;    /* [vocab] scratch */
};

double serve_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

sched *sched_new(server *srv, loom_engine *e, loom_comm *comm, loom_err *err) {
    sched *s = mem_zalloc(1, sizeof *s, "the scheduler", err);
    if (!s) return NULL;
    s->srv = srv;
    s->e = e;
    s->comm = comm;
    s->max_seqs = srv->o->max_num_seqs;
    s->max_tokens = srv->o->max_num_batched_tokens;
    s->max_queue = srv->o->max_queue;
    const char *what = "the scheduler's tables";
    if ((s->queue = mem_zalloc(s->max_queue > 0 ? (size_t)s->max_queue : 1, sizeof *s->queue, what, err)) &&
        (s->running = mem_zalloc((size_t)s->max_seqs, sizeof *s->running, what, err)) &&
        (s->slot_used = mem_zalloc((size_t)s->max_seqs, sizeof *s->slot_used, what, err)) &&
        (s->row_req = mem_zalloc((size_t)s->max_seqs, sizeof *s->row_req, what, err)) &&
        (s->logprob =
             mem_array((size_t)srv->info.vocab, sizeof *s->logprob, "the scheduler's log-probabilities", err)) &&
        !step_init(&s->st, s->max_tokens, s->max_seqs, err))
        return s;
    sched_free(s);
    return NULL;
}

void sched_free(sched *s) {
    if (!s) return;
    free(s->queue);
    free(s->running);
    free(s->slot_used);
    free(s->row_req);
    step_free(&s->st);
    free(s->logprob);
    free(s);
}

int sched_submit(sched *s, request *r, char *msg, size_t cap) {
    server *srv = s->srv;
    if (srv->failed[0]) return snprintf(msg, cap, "the engine failed: %s", srv->failed), 503;
    if (srv->draining) return snprintf(msg, cap, "the server is shutting down"), 503;
    if (s->q_len >= s->max_queue)
        return snprintf(msg, cap, "the server is busy: %d requests are waiting (--max-queue)", s->q_len), 503;
    r->state = REQ_WAITING;
    r->t_arrive = serve_now();
    r->refs++;
    s->queue[(s->q_head + s->q_len++) % s->max_queue] = r;
    return 0;
}

void sched_gauges(const sched *s, metrics *m) {
    m->running = s->n_running;
    m->waiting = s->q_len;
    m->slots_used = 0;
    for (int i = 0; i < s->max_seqs; i++) m->slots_used += s->slot_used[i];
}

static void finish(sched *s, request *r, req_finish why) {
    server *srv = s->srv;
    if (r->finish == FINISH_NONE) r->finish = why;
    request_end_text(r);
    r->state = REQ_FINISHED;
    metrics *m = &srv->met;
    if (r->error[0]) m->failed++;
    else if (r->finish == FINISH_STOP) m->finished_stop++;
    else if (r->finish == FINISH_LENGTH) m->finished_length++;
    else m->finished_abort++;
    if (r->n_tokens && !r->error[0]) histogram_add(&m->e2e, r->t_last - r->t_arrive);
    request_changed(r);
}

/* Ends a running request and frees its slot. */
static void release(sched *s, int i, req_finish why) {
    request *r = s->running[i];
    finish(s, r, why);
    s->slot_used[r->slot] = false;
    memmove(s->running + i, s->running + i + 1, (s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
    request_unref(r);
}

/* Queue to slots, oldest first; requests whose client left while waiting are dropped. A slot
 * taken is forgotten on every rank with this step, and the request's decoder reads its prompt
 * (text dropped) so that the completion continues it: a leading space stays. */
static void admit(sched *s) {
    while (s->q_len && s->n_running < s->max_seqs) {
        request *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->max_queue;
        s->q_len--;
        if (r->cancel) {
            finish(s, r, FINISH_CANCELLED);
            request_unref(r);
            continue;
        }
        int slot = 0;
        while (s->slot_used[slot]) slot++;
        s->slot_used[slot] = true;
        s->st.reset[s->st.n_reset++] = slot;
        size_t len; /* the decoder reads the prompt first, its text dropped: the output continues it */
        for (int i = 0; r->dec && i < r->n_prompt; i++) loom_detokenizer_next(r->dec, r->prompt[i], &len);
        r->slot = slot;
        r->state = REQ_RUNNING;
        s->running[s->n_running++] = r;
    }
}

/* Fills the step: decode tokens first, then prompt chunks within the token budget. */
static void build_step(sched *s) {
    step *st = &s->st;
    for (int i = s->n_running - 1; i >= 0; i--)
        if (s->running[i]->cancel) release(s, i, FINISH_CANCELLED);
    admit(s);
    int n = 0;
    for (int i = 0; i < s->n_running; i++) {
        request *r = s->running[i];
        if (r->prefilled < r->n_prompt || n == s->max_tokens) continue;
        st->ids[n] = r->tokens[r->n_tokens - 1].id;
        st->pos[n] = r->n_prompt + r->n_tokens - 1;
        st->seq[n] = r->slot;
        s->row_req[st->n_logits] = r;
        st->logit_rows[st->n_logits++] = n++;
    }
    for (int i = 0; i < s->n_running && n < s->max_tokens; i++) {
        request *r = s->running[i];
        if (r->prefilled == r->n_prompt) continue;
        int k = r->n_prompt - r->prefilled;
        if (k > s->max_tokens - n) k = s->max_tokens - n;
        for (int j = 0; j < k; j++) {
            st->ids[n + j] = r->prompt[r->prefilled + j];
            st->pos[n + j] = r->prefilled + j;
            st->seq[n + j] = r->slot;
        }
        n += k;
        r->prefilled += k;
        s->srv->met.prompt_tokens += k;
        if (r->prefilled == r->n_prompt) {
            s->row_req[st->n_logits] = r;
            st->logit_rows[st->n_logits++] = n - 1;
        }
    }
    st->n_tokens = n;
}

/* log-softmax of logits into s->logprob (the raw distribution, before temperature, as vLLM
 * reports it), then the chosen token's value and the top alternatives. */
static void fill_logprobs(sched *s, const request *r, const float *logits, req_token *t) {
    int vocab = s->srv->info.vocab;
    float mx = logits[0];
    for (int i = 1; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    for (int i = 0; i < vocab; i++) s->logprob[i] = logits[i] - lse;
    t->logprob = s->logprob[t->id];
    t->n_top = 0;
    for (int i = 0; i < vocab; i++) { /* insertion into the sorted top list; ties keep the lower id */
        int k = t->n_top;
        if (k == r->top_logprobs && (k == 0 || s->logprob[i] <= t->top_logprob[k - 1])) continue;
        if (k < r->top_logprobs) t->n_top++;
        else k--;
        while (k > 0 && t->top_logprob[k - 1] < s->logprob[i]) {
            t->top_logprob[k] = t->top_logprob[k - 1];
            t->top_id[k] = t->top_id[k - 1];
            k--;
        }
        t->top_logprob[k] = s->logprob[i];
        t->top_id[k] = i;
    }
}

static bool is_eos(const server *srv, int32_t id) {
    for (int i = 0; i < srv->info.n_eos; i++)
        if (srv->info.eos_ids[i] == id) return true;
    return false;
}

/* Samples every row of the step and hands the tokens to their requests. */
static void take_tokens(sched *s, const float *logits) {
    server *srv = s->srv;
    double now = serve_now();
    int vocab = srv->info.vocab;
    for (int i = 0; i < s->st.n_logits; i++) {
        request *r = s->row_req[i];
        const float *row = logits + (size_t)i * vocab;
        req_token t = {.id = loom_sampler_next(r->smp, row)};
        if (r->logprobs) fill_logprobs(s, r, row, &t);
        pthread_mutex_lock(&srv->lock);
        if (!r->n_tokens) histogram_add(&srv->met.ttft, now - r->t_arrive), r->t_first = now;
        else histogram_add(&srv->met.itl, now - r->t_last);
        r->t_last = now;
        srv->met.generation_tokens++;
        if (!r->sampling.ignore_eos && is_eos(srv, t.id)) r->finish = FINISH_STOP; /* counted, not printed */
        request_add_token(r, &t);
        if (r->n_tokens >= r->max_tokens || r->n_prompt + r->n_tokens >= srv->max_ctx) {
            if (r->finish == FINISH_NONE) r->finish = FINISH_LENGTH;
        }
        request_changed(r);
        pthread_mutex_unlock(&srv->lock);
    }
    pthread_mutex_lock(&srv->lock);
    for (int i = s->n_running - 1; i >= 0; i--)
        if (s->running[i]->finish != FINISH_NONE) release(s, i, s->running[i]->finish);
    pthread_mutex_unlock(&srv->lock);
}

/* The engine failed: every request, running or waiting, fails with its message. */
static void fail_all(sched *s, const char *why) {
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    snprintf(srv->failed, sizeof srv->failed, "%s", why);
    for (int i = s->n_running - 1; i >= 0; i--) {
        snprintf(s->running[i]->error, sizeof s->running[i]->error, "%s", why);
        release(s, i, FINISH_CANCELLED);
    }
    while (s->q_len) {
        request *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->max_queue;
        s->q_len--;
        snprintf(r->error, sizeof r->error, "%s", why);
        finish(s, r, FINISH_CANCELLED);
        request_unref(r);
    }
    pthread_mutex_unlock(&srv->lock);
}

int sched_loop(sched *s, volatile int *stop_signal, loom_err *err) {
    server *srv = s->srv;
    const float *logits;
    double last_step = serve_now();
    for (;;) {
        pthread_mutex_lock(&srv->lock);
        if (*stop_signal) srv->draining = true;
        step_clear(&s->st);
        build_step(s);
        bool idle = s->st.n_tokens == 0 && s->st.n_reset == 0;
        if (idle && srv->draining) {
            pthread_mutex_unlock(&srv->lock);
            break;
        }
        if (idle) { /* sleep until a request comes, but send a step every second (steps.c) */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 100 * 1000 * 1000;
            if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&srv->work, &srv->lock, &until);
            pthread_mutex_unlock(&srv->lock);
            if (serve_now() - last_step < 1.0) continue;
        } else {
            pthread_mutex_unlock(&srv->lock);
        }
        last_step = serve_now();
        if (step_run(s->e, s->comm, &s->st, &logits, err)) {
            fail_all(s, err->msg);
            return -1;
        }
        if (s->st.n_logits) take_tokens(s, logits);
    }
    step_clear(&s->st);
    s->st.cmd = STEP_STOP;
    return step_run(s->e, s->comm, &s->st, &logits, err);
}
