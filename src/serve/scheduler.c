/* Continuous batching over the paged KV cache. Requests wait in a FIFO queue for one of
 * --max-num-seqs sequence slots. Each engine step first takes the next token of every decoding
 * sequence, then fills the rest of the --max-num-batched-tokens budget with chunks of prompts,
 * oldest first (chunked prefill), so a long prompt delays running streams by one chunk at most.
 * A request admitted starts from the longest prefix of its tokens the KV cache already holds in
 * whole blocks (prefix caching), and computes only the rest; its last token always runs, for
 * its logits.
 *
 * Blocks are counted before each step: a decoding sequence that needs a block when none is free
 * preempts the newest running request, whose blocks go back to the pool (its full ones stay
 * cached) and which goes back to the head of the queue with its output so far, to be recomputed
 * from its cached blocks, as vLLM V1 does; prompts take only the blocks that are free. A
 * request's slot is forgotten on every rank when it finishes, hits the context limit, is
 * preempted or its client leaves.
 *
 * One scheduler serves one data-parallel replica (replicas.c runs them together). It decides
 * on its own mirror of the replica's KV bookkeeping (`book`): every change it makes goes into the
 * step's message, and each of the replica's ranks, rank 0's own engine included, applies it
 * before the step's tokens (steps.c), so the copies agree. The scheduler thread holds the server
 * lock while it reads and updates requests, and lets it go while the engine runs, so HTTP
 * threads queue and stream meanwhile. Everything a step needs is allocated here once; requests
 * allocate their own output as it grows.
 *
 * The choices of one request (n > 1, best_of) share its prompt's KV: with prefix caching, the
 * first is queued alone and the others are held back until it has computed the prompt (its
 * first token is sampled); they then go to the head of the queue and are admitted from its
 * cached blocks, instead of all prefilling the same prompt at once. Without prefix caching
 * nothing can be shared, and they are queued together.
 *
 * A request whose logits are processed (penalties, logit_bias, min_tokens: logits.h) samples
 * from a processed copy of its row; it gets no speculative proposals, since verification
 * samples from the raw rows. */
#include "serve/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/clock.h"
#include "serve/logits.h"
#include "serve/steps.h"
#include "util/alloc.h"
#include "util/err.h"

/* The logit rows of one request in a step: its last token's, and one after each proposal it
 * verifies (n_draft of them, none but when decoding speculatively). */
typedef struct verify_group {
    request *r;
    int row0, n_draft;
    int n_rows; /* an embedding's rows to pool (mean pooling: every token of the chunk) */
    int32_t draft[LOOM_SPEC_MAX_TOKENS];
} verify_group;

struct sched {
    server *srv;
    int replica;
    loom_engine *book; /* the replica's KV bookkeeping (a mirror of its engines: loom_engine_mirror_new) */
    int max_seqs, max_tokens, max_queue;
    request **queue; /* waiting, FIFO ring of max_queue + max_seqs (room for the preempted) */
    int q_head, q_len, q_cap;
    int held;          /* choices held back until their first has computed the prompt (count in the queue's room) */
    request **running; /* in admission order (prefill priority) */
    int n_running;
    bool *slot_used;
    step *st;             /* this replica's in the round */
    verify_group *groups; /* [max_seqs] the step's logit rows, a run of them per request */
    int n_groups;
    /* speculative decoding (NULL: none): the decoding requests of a step and their proposals */
    loom_speculator *sp;
    int k;
    request **decoding;
    int n_decoding;
    int32_t *slots, *drafts;
    const int32_t **hists;
    int *lens, *max_draft, *n_draft;
    float *logprob;         /* [vocab] scratch */
    logits_scratch scratch; /* a request's processed logit row, its counts and mask */
    int32_t *context;       /* [max_ctx] scratch: a preempted request's prompt and output */
    int32_t *matched;       /* [max_ctx] scratch: the cached blocks of a prefix */
    int pending;            /* blocks this step's tokens will take from the pool when it runs */
    loom_kv_stats kv;       /* as of the last step, for the gauges */
};

sched *sched_new(server *srv, const loom_engine *e, step *st, int replica, loom_err *err) {
    sched *s = mem_zalloc(1, sizeof *s, "the scheduler", err);
    if (!s) return NULL;
    s->srv = srv;
    s->replica = replica;
    s->st = st;
    s->max_seqs = srv->o->max_num_seqs;
    s->max_tokens = srv->o->max_num_batched_tokens;
    s->max_queue = srv->o->max_queue;
    s->q_cap = s->max_queue + s->max_seqs;
    s->sp = srv->o->speculator;
    s->k = srv->o->num_speculative_tokens;
    const char *what = "the scheduler's tables";
    /* every replica's engine is rank 0's twin: the same pool and sequences */
    if ((s->book = loom_engine_mirror_new(e, err)) && (loom_engine_get_kv_stats(s->book, &s->kv), 1) &&
        (s->queue = mem_zalloc((size_t)s->q_cap, sizeof *s->queue, what, err)) &&
        (s->context = mem_array((size_t)srv->max_ctx, sizeof *s->context, what, err)) &&
        (s->matched = mem_array((size_t)srv->max_ctx, sizeof *s->matched, what, err)) &&
        (s->running = mem_zalloc((size_t)s->max_seqs, sizeof *s->running, what, err)) &&
        (s->slot_used = mem_zalloc((size_t)s->max_seqs, sizeof *s->slot_used, what, err)) &&
        (s->groups = mem_zalloc((size_t)s->max_seqs, sizeof *s->groups, what, err)) &&
        (s->decoding = mem_zalloc((size_t)s->max_seqs, sizeof *s->decoding, what, err)) &&
        (s->slots = mem_zalloc((size_t)s->max_seqs, sizeof *s->slots, what, err)) &&
        (s->hists = mem_zalloc((size_t)s->max_seqs, sizeof *s->hists, what, err)) &&
        (s->lens = mem_zalloc((size_t)s->max_seqs, sizeof *s->lens, what, err)) &&
        (s->max_draft = mem_zalloc((size_t)s->max_seqs, sizeof *s->max_draft, what, err)) &&
        (s->n_draft = mem_zalloc((size_t)s->max_seqs, sizeof *s->n_draft, what, err)) &&
        (s->drafts = mem_zalloc((size_t)s->max_seqs * (s->k + 1), sizeof *s->drafts, what, err)) &&
        (s->logprob =
             mem_array((size_t)srv->info.vocab, sizeof *s->logprob, "the scheduler's log-probabilities", err)) &&
        (s->scratch.row =
             mem_array((size_t)srv->info.vocab, sizeof *s->scratch.row, "the scheduler's logit row", err)) &&
        (s->scratch.count =
             mem_zalloc((size_t)srv->info.vocab, sizeof *s->scratch.count, "the scheduler's token counts", err)) &&
        (s->scratch.allowed =
             mem_array(((size_t)srv->info.vocab + 31) / 32, sizeof *s->scratch.allowed, "a token mask", err)))
        return s;
    sched_free(s);
    return NULL;
}

void sched_free(sched *s) {
    if (!s) return;
    free(s->queue);
    free(s->context);
    free(s->matched);
    free(s->running);
    free(s->slot_used);
    free(s->groups);
    free(s->decoding), free(s->slots), free(s->hists), free(s->lens), free(s->max_draft), free(s->n_draft);
    free(s->drafts);
    loom_engine_free(s->book);
    free(s->logprob);
    free(s->scratch.row);
    free(s->scratch.count);
    free(s->scratch.allowed);
    free(s);
}

/* Queues choice r at the queue's tail, or at its head (before the other waiting requests). */
static void enqueue(sched *s, request *r, bool head) {
    r->state = REQ_WAITING;
    r->refs++;
    if (head) s->q_head = (s->q_head + s->q_cap - 1) % s->q_cap;
    s->queue[head ? s->q_head : (s->q_head + s->q_len) % s->q_cap] = r;
    s->q_len++;
}

/* The choices r held back go to the head of the queue, in order: r has computed the prompt
 * (or ended), so they are admitted next, from its cached blocks. */
static void queue_siblings(sched *s, request *r) {
    if (!r->siblings_held) return;
    r->siblings_held = false;
    s->held -= r->n_choices - 1;
    for (int i = r->n_choices - 1; i > 0; i--) enqueue(s, r->choices[i], true);
}

int sched_submit(sched *s, request *r, char *msg, size_t cap) {
    server *srv = s->srv;
    if (srv->failed[0]) return snprintf(msg, cap, "the engine failed: %s", srv->failed), 503;
    if (srv->draining) return snprintf(msg, cap, "the server is shutting down"), 503;
    if (s->q_len + s->held + r->n_choices > s->max_queue)
        return snprintf(msg, cap, "the server is busy: %d requests are waiting (--max-queue)", s->q_len + s->held), 503;
    for (int i = 0; i < r->n_choices; i++) (i ? r->choices[i] : r)->t_arrive = serve_now();
    enqueue(s, r, false);
    /* an embedding's inputs are prompts of their own, with no prefix to wait for */
    r->siblings_held = r->n_choices > 1 && s->kv.prefix_caching && r->kind != REQ_POOL;
    if (r->siblings_held) s->held += r->n_choices - 1;
    else
        for (int i = 1; i < r->n_choices; i++) enqueue(s, r->choices[i], false);
    return 0;
}

void sched_gauges(const sched *s, metrics *m) {
    m->running += s->n_running;
    m->waiting += s->q_len + s->held;
    for (int i = 0; i < s->max_seqs; i++) m->slots_used += s->slot_used[i];
    m->blocks_used += s->kv.blocks_used;
    m->blocks_total += s->kv.blocks;
}

static void finish(sched *s, request *r, req_finish why) {
    server *srv = s->srv;
    queue_siblings(s, r);
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

/* Takes running request i out of the running list, its slot forgotten on every rank (here at
 * once: the gauges count its blocks free before its client hears it finished). Lock held. */
static request *unrun(sched *s, int i) {
    request *r = s->running[i];
    step_reset(s->st, s->book, r->slot);
    if (s->sp) loom_speculator_reset_seq(s->sp, r->slot);
    loom_engine_get_kv_stats(s->book, &s->kv);
    s->slot_used[r->slot] = false;
    memmove(s->running + i, s->running + i + 1, (s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
    return r;
}

/* Ends a running request and frees its slot. */
static void release(sched *s, int i, req_finish why) {
    request *r = unrun(s, i);
    finish(s, r, why);
    request_unref(r);
}

/* Blocks the pool has for more of this step's tokens: free now (cached ones included: they are
 * evicted as needed), less those its tokens so far will take. */
static int free_blocks(const sched *s) {
    loom_kv_stats kv;
    loom_engine_get_kv_stats(s->book, &kv);
    return kv.blocks - kv.blocks_used - s->pending;
}

/* The newest running request goes back to the head of the queue, its blocks to the pool; its
 * output so far stays, and it is recomputed from its cached blocks when admitted again. */
static void preempt_newest(sched *s) {
    request *r = unrun(s, s->n_running - 1);
    r->state = REQ_WAITING;
    r->computed = 0;
    r->n_pooled = 0; /* an embedding pools its rows again as they are recomputed */
    s->q_head = (s->q_head + s->q_cap - 1) % s->q_cap;
    s->queue[s->q_head] = r;
    s->q_len++;
    s->srv->met.preemptions++;
}

static int32_t context_token(const request *r, int i) {
    return i < r->n_prompt ? r->prompt[i] : r->tokens[i - r->n_prompt].id;
}

/* Tokens of r's context (prompt, then output) its sequence does not hold yet. */
static int to_compute(const request *r) { return r->n_prompt + r->n_tokens - r->computed; }

static int blocks_for(int positions, int block_size) { return (positions + block_size - 1) / block_size; }

/* Whether r reads the output row of every token of its prompt (an embedding's mean pooling). */
static bool pools_every_token(const sched *s, const request *r) {
    return r->kind == REQ_POOL && s->srv->o->pool_every_token;
}

/* The step's next k tokens are r's next uncomputed ones, with a logit row when they reach the
 * end of what r knows (its next token is sampled from it, or its last row pooled), or with
 * one each when r pools them all. */
static void add_tokens(sched *s, request *r, int k) {
    step *st = s->st;
    int bs = s->kv.block_size;
    s->pending += blocks_for(r->computed + k, bs) - blocks_for(r->computed, bs);
    for (int j = 0; j < k; j++) {
        st->ids[st->n_tokens + j] = context_token(r, r->computed + j);
        st->pos[st->n_tokens + j] = r->computed + j;
        st->seq[st->n_tokens + j] = r->slot;
    }
    st->n_tokens += k;
    r->computed += k;
    if (pools_every_token(s, r)) {
        s->groups[s->n_groups++] = (verify_group){.r = r, .row0 = st->n_logits, .n_rows = k};
        for (int j = k; j > 0; j--) st->logit_rows[st->n_logits++] = st->n_tokens - j;
    } else if (!to_compute(r)) {
        s->groups[s->n_groups++] = (verify_group){.r = r, .row0 = st->n_logits, .n_rows = 1};
        st->logit_rows[st->n_logits++] = st->n_tokens - 1;
    }
}

/* A decoding request's step: its last token, then the proposals that fit in the free blocks (its
 * last token's block is counted already), each with a logit row. */
static void add_decode(sched *s, request *r, const int32_t *draft, int n_draft) {
    step *st = s->st;
    int bs = s->kv.block_size, p = r->computed;
    while (n_draft && blocks_for(p + 1 + n_draft, bs) - blocks_for(p + 1, bs) > free_blocks(s)) n_draft--;
    s->pending += blocks_for(p + 1 + n_draft, bs) - blocks_for(p + 1, bs);
    verify_group *g = &s->groups[s->n_groups++];
    *g = (verify_group){.r = r, .row0 = st->n_logits, .n_draft = n_draft, .n_rows = 1}; /* an embedding's last */
    for (int j = 0; j <= n_draft; j++) {
        int t = st->n_tokens++;
        st->ids[t] = j ? draft[j - 1] : context_token(r, p);
        st->pos[t] = p + j, st->seq[t] = r->slot;
        st->logit_rows[st->n_logits++] = t;
        if (j) g->draft[j - 1] = draft[j - 1];
    }
    r->computed++; /* the proposals count once the target keeps them */
}

/* Room for each of the step's decoding requests' proposals: up to k each and within the token
 * budget, the request's own limits and the context (none for a request that processes its
 * logits). */
static void proposal_room(sched *s, int n) {
    int budget = s->max_tokens - s->st->n_tokens - n; /* past each one's last token */
    for (int i = 0; i < n; i++) {
        request *r = s->decoding[i];
        int len = r->n_prompt + r->n_tokens, m = s->sp && !request_processes_logits(r) ? s->k : 0;
        if (m > r->max_tokens - r->n_tokens - 1) m = r->max_tokens - r->n_tokens - 1;
        if (m > s->srv->max_ctx - len) m = s->srv->max_ctx - len;
        if (m > budget) m = budget;
        m = m > 0 ? m : 0;
        budget -= m;
        s->slots[i] = r->slot, s->hists[i] = r->context, s->lens[i] = len, s->max_draft[i] = m, s->n_draft[i] = 0;
    }
}

/* Of r's next `want` tokens, as many as the free blocks hold. */
static int tokens_that_fit(const sched *s, const request *r, int want) {
    int bs = s->kv.block_size, room = (blocks_for(r->computed, bs) + free_blocks(s)) * bs - r->computed;
    return want < room ? want : room > 0 ? room : 0;
}

/* The request at the queue's head takes a free slot, starting from the longest prefix of its
 * context the KV cache holds (its last token always computed), if the blocks for its first
 * chunk are free; false when it cannot be admitted this step. A request whose client left
 * while it waited is dropped. */
static bool admit_next(sched *s) {
    request *r = s->queue[s->q_head];
    if (!r->cancel) {
        int known = r->n_prompt + r->n_tokens, bs = s->kv.block_size;
        const int32_t *ctx = r->prompt;
        if (r->n_tokens) { /* preempted: its prompt and output */
            for (int i = 0; i < known; i++) s->context[i] = context_token(r, i);
            ctx = s->context;
        }
        /* mean pooling reads every token's row: nothing may come from the cache */
        int m = pools_every_token(s, r) ? 0 : loom_engine_match_prefix(s->book, ctx, known - 1, s->matched);
        int budget = s->max_tokens - s->st->n_tokens, want = known - m * bs;
        int first = want < budget ? want : budget;
        /* assume every matched block leaves the free list: the chunk's blocks must fit beside them */
        if (!step_attach_fits(s->st, m) || blocks_for(m * bs + first, bs) - m > free_blocks(s) - m) return false;
        int slot = 0;
        while (s->slot_used[slot]) slot++;
        loom_err why;
        if (m && step_attach(s->st, s->book, slot, s->matched, m, &why)) m = 0; /* cannot happen: computed instead */
        s->slot_used[slot] = true;
        if (r->cached_tokens < 0) { /* first admission */
            size_t len;             /* the decoder reads the prompt first, its text dropped: the output continues it */
            for (int i = 0; r->dec && i < r->n_prompt; i++) loom_detokenizer_next(r->dec, r->prompt[i], &len);
            r->cached_tokens = m * bs;
            s->srv->met.prompt_tokens += r->n_prompt;
            s->srv->met.prefix_queries += r->n_prompt;
            s->srv->met.prefix_hits += m * bs;
        }
        r->slot = slot;
        r->computed = m * bs;
        r->state = REQ_RUNNING;
        s->running[s->n_running++] = r;
        add_tokens(s, r, tokens_that_fit(s, r, first));
    }
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    if (r->cancel) {
        finish(s, r, FINISH_CANCELLED);
        request_unref(r);
    }
    return true;
}

/* A step is built in three parts, so that a draft model's passes do not hold the lock that HTTP
 * threads take to queue, stream and read /metrics (k passes a step: sched_propose):
 * sched_begin picks the decoding requests (preempting the newest when they need blocks that are
 * not free) and their proposals' room; sched_propose has them proposed; sched_build adds their
 * tokens, then prompt chunks of running requests, then admissions, within the token budget and
 * the free blocks. Only the scheduler's thread changes what the proposer reads (the requests'
 * contexts), and a running request is not freed before its release, which is this thread's. */
void sched_begin(sched *s) {
    for (int i = s->n_running - 1; i >= 0; i--)
        if (s->running[i]->cancel) release(s, i, FINISH_CANCELLED);
    s->pending = 0;
    s->n_groups = 0;
    int bs = s->kv.block_size, n_decoding = 0;
    for (int i = 0; i < s->n_running && s->st->n_tokens + n_decoding < s->max_tokens; i++) {
        request *r = s->running[i];
        if (to_compute(r) != 1) continue;
        /* a new block and none free: the newest give way, r itself once it is the newest */
        while (r->state == REQ_RUNNING && r->computed % bs == 0 && free_blocks(s) < 1) preempt_newest(s);
        if (r->state != REQ_RUNNING) break;
        s->pending += blocks_for(r->computed + 1, bs) - blocks_for(r->computed, bs);
        s->decoding[n_decoding++] = r;
    }
    s->n_decoding = n_decoding;
    proposal_room(s, n_decoding);
}

void sched_propose(sched *s) {
    loom_err why;
    if (s->sp && s->n_decoding &&
        loom_speculator_propose(s->sp, s->n_decoding, s->slots, s->hists, s->lens, s->max_draft, s->drafts, s->n_draft,
                                &why)) {
        fprintf(stderr, "loom serve: proposing failed, decoding on without proposals: %s\n", why.msg);
        for (int i = 0; i < s->n_decoding; i++) s->n_draft[i] = 0;
    }
}

static void build_step(sched *s) {
    for (int i = 0; i < s->n_decoding; i++) add_decode(s, s->decoding[i], s->drafts + (size_t)i * s->k, s->n_draft[i]);
    for (int i = 0; i < s->n_running && s->st->n_tokens < s->max_tokens; i++) {
        request *r = s->running[i];
        int budget = s->max_tokens - s->st->n_tokens, want = to_compute(r) < budget ? to_compute(r) : budget;
        int k = to_compute(r) > 1 ? tokens_that_fit(s, r, want) : 0;
        if (k) add_tokens(s, r, k);
    }
    while (s->q_len && s->n_running < s->max_seqs && s->st->n_tokens < s->max_tokens && admit_next(s)) {
    }
    /* prompts holding every block between them, none able to go on: the newest gives way */
    if (!s->st->n_tokens && s->n_running > 1 && free_blocks(s) <= 0) preempt_newest(s);
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

/* An embedding's rows of the step, summed in double in token order; once its prompt is all
 * computed, its embedding: the mean (or the last row), L2-normalised when the model says. Lock
 * held. */
static void pool_rows(sched *s, request *r, const float *rows, int n) {
    const loom_model_info *info = &s->srv->info;
    int w = info->out_width;
    if (info->task == LOOM_TASK_SCORE) { /* softmax over (no, yes) at the last token: P(yes) */
        const float *last = rows + (size_t)(n - 1) * w;
        r->pooled[0] = 1.0 / (1.0 + exp((double)last[s->srv->score_ids[0]] - last[s->srv->score_ids[1]]));
        r->n_pooled = 1;
        r->finish = FINISH_STOP;
        return;
    }
    if (!r->n_pooled) memset(r->pooled, 0, (size_t)w * sizeof *r->pooled); /* a start, or again after preemption */
    for (int t = 0; t < n; t++, r->n_pooled++)
        for (int j = 0; j < w; j++) r->pooled[j] += rows[(size_t)t * w + j];
    if (to_compute(r)) return;
    double norm = 0;
    for (int j = 0; j < w; j++) {
        r->pooled[j] /= r->n_pooled;
        norm += r->pooled[j] * r->pooled[j];
    }
    for (int j = 0; info->normalize && norm > 0 && j < w; j++) r->pooled[j] /= sqrt(norm);
    r->finish = FINISH_STOP;
}

/* Samples every request's rows of the step (verifying its proposals, if any; a processed copy of
 * its row when it processes its logits) and hands the tokens to it; a request's sequence is cut
 * back past the proposals the target rejected; an embedding pools its rows instead. The
 * log-probabilities reported (and best_of's cumulative one) are the raw model's, as vLLM's by
 * default. */
static void take_tokens(sched *s, const float *logits) {
    server *srv = s->srv;
    double now = serve_now();
    int width = srv->info.out_width; /* vocab, or an embedding model's hidden size */
    for (int i = 0; i < s->n_groups; i++) {
        verify_group *g = &s->groups[i];
        request *r = g->r;
        const float *rows = logits + (size_t)g->row0 * width;
        if (r->kind == REQ_POOL) {
            pthread_mutex_lock(&srv->lock);
            pool_rows(s, r, rows, g->n_rows);
            request_changed(r);
            pthread_mutex_unlock(&srv->lock);
            continue;
        }
        int32_t out[LOOM_SPEC_MAX_TOKENS + 1];
        int n_out = 1;
        loom_err why = {{0}};
        if (g->n_draft) n_out = loom_speculator_verify(s->sp, r->smp, rows, g->draft, g->n_draft, out);
        else if (!request_processes_logits(r)) out[0] = loom_sampler_next(r->smp, rows);
        else if ((out[0] = request_sample(r, &srv->info, rows, &s->scratch, &why)) < 0) n_out = 0;
        pthread_mutex_lock(&srv->lock);
        if (!n_out) { /* its grammar allowed nothing, or gave up (too ambiguous, cancelled): it fails with why */
            snprintf(r->error, sizeof r->error, "%s", why.msg);
            r->error_status = 400;
            if (r->finish == FINISH_NONE) r->finish = FINISH_CANCELLED;
        }
        if (!r->n_tokens) histogram_add(&srv->met.ttft, now - r->t_arrive), r->t_first = now;
        else histogram_add(&srv->met.itl, now - r->t_last);
        r->t_last = now;
        for (int j = 0; j < n_out && r->finish == FINISH_NONE; j++) {
            req_token t = {.id = out[j]};
            if (r->logprobs || r->ranked) fill_logprobs(s, r, rows + (size_t)j * width, &t);
            r->cum_logprob += t.logprob;
            srv->met.generation_tokens++;
            if ((!r->sampling.ignore_eos && is_eos(srv, t.id)) || request_is_stop_token(r, t.id))
                r->finish = FINISH_STOP; /* counted, not printed */
            request_add_token(r, &t);
            if (r->gm && grammar_matcher_done(r->gm) && r->finish == FINISH_NONE) r->finish = FINISH_STOP;
            if (r->n_tokens >= r->max_tokens || r->n_prompt + r->n_tokens >= srv->max_ctx) {
                if (r->finish == FINISH_NONE) r->finish = FINISH_LENGTH;
            }
        }
        r->computed += n_out > 0 ? n_out - 1 : 0; /* the proposals kept; the sequence holds them and no more */
        if (g->n_draft && step_truncate(s->st, s->book, r->slot, r->computed, &why)) {
            snprintf(r->error, sizeof r->error, "%s", why.msg); /* cannot happen: the pass wrote these rows */
            if (r->finish == FINISH_NONE) r->finish = FINISH_CANCELLED;
        }
        queue_siblings(s, r); /* r has computed the prompt */
        request_changed(r);
        pthread_mutex_unlock(&srv->lock);
    }
    pthread_mutex_lock(&srv->lock);
    if (s->sp) loom_speculator_get_stats(s->sp, &srv->met.spec);
    for (int i = s->n_running - 1; i >= 0; i--)
        if (s->running[i]->finish != FINISH_NONE) release(s, i, s->running[i]->finish);
    pthread_mutex_unlock(&srv->lock);
}

void sched_fail_all(sched *s, const char *why) {
    server *srv = s->srv;
    pthread_mutex_lock(&srv->lock);
    snprintf(srv->failed, sizeof srv->failed, "%s", why);
    for (int i = s->n_running - 1; i >= 0; i--) {
        snprintf(s->running[i]->error, sizeof s->running[i]->error, "%s", why);
        release(s, i, FINISH_CANCELLED);
    }
    while (s->q_len) {
        request *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        snprintf(r->error, sizeof r->error, "%s", why);
        finish(s, r, FINISH_CANCELLED);
        request_unref(r);
    }
    pthread_mutex_unlock(&srv->lock);
}

bool sched_build(sched *s) {
    build_step(s); /* onto the sequence changes made since the last step */
    const step *st = s->st;
    loom_batch b = {.n_tokens = st->n_tokens, .ids = st->ids, .pos = st->pos, .seq = st->seq};
    const float *none;
    loom_err why;
    if (loom_forward(s->book, &b, &none, &why)) /* cannot happen: the blocks were counted */
        fprintf(stderr, "loom serve: replica %d's bookkeeping refused its step: %s\n", s->replica, why.msg);
    return st->n_tokens || st->n_ops;
}

void sched_take(sched *s, const float *logits) {
    take_tokens(s, logits); /* its cuts go to the replica's ranks with the next step */
    pthread_mutex_lock(&s->srv->lock);
    loom_engine_get_kv_stats(s->book, &s->kv);
    pthread_mutex_unlock(&s->srv->lock);
}

int sched_load(const sched *s) { return 4 * (s->q_len + s->held) + s->n_running; }

unsigned long long sched_kv_digest(const sched *s) { return loom_engine_kv_digest(s->book); }

int sched_cached_tokens(sched *s, const request *r) {
    return r->n_prompt > 1
               ? loom_engine_match_prefix(s->book, r->prompt, r->n_prompt - 1, s->matched) * s->kv.block_size
               : 0;
}
