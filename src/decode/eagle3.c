/* The eagle3 method: an Eagle3 head drafts from the target's own hidden states (model/config.h's
 * eagle3_config for the computation, vLLM's EagleProposer for the schedule).
 *
 * The draft's position q holds the pair (x[q+1], g[q]): the token after q, and g[q] = fc of the
 * target's hidden states at q entering its aux layers (engine captures; all-gathered under SP,
 * sent from their stages under PP). Its logits there guess x[q+2]; a guess's next guess runs on
 * the draft's own pre-norm state instead of g, at the next position (greedy, as vLLM drafts).
 *
 * After every target pass (the engine's after_pass hook) this rank applies fc to the pass's
 * rows and feeds the draft every pair it can already form from tokens the target holds for sure
 * (a prompt's, a plain step's); the rows whose next token is not settled yet (the last one, and
 * those of proposals the target is still to verify) wait, staged. loom_speculator_propose
 * then knows the accepted tokens: it cuts the draft back to its settled pairs, feeds the staged
 * rows with them (the first of which the target just emitted), and from that pass's logits on
 * drafts k tokens. The first step's position is the target's, so the draft's keys sit at the
 * target's positions; speculators trains with every position one higher, which RoPE, depending
 * only on differences, cannot tell apart.
 *
 * A sequence that starts from cached prefix blocks has no hidden states for them: it is decoded
 * without Eagle3 proposals until its slot is reset (the draft's KV does not live in the target's
 * blocks: see docs/DESIGN.md section 9). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "decode/spec.h"
#include "kernels/kernels.h"
#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "util/alloc.h"
#include "util/err.h"

typedef struct eagle3_state {
    wmat fc;        /* [hidden, 3 target_hidden]: the three captured states into one */
    int32_t *d2t;   /* [draft_vocab]: draft id i is target id i + d2t[i] */
    int hidden, th; /* the draft's hidden size, the target's */
    float *aux;     /* [max_tokens][3 th]: a pass's captured rows side by side */
    float *g;       /* [max_tokens][hidden]: fc of them */
    float *in;      /* [max_tokens][hidden]: a draft pass's rows beside its ids */
    /* per sequence slot: the settled pairs the draft holds end at staged_from; rows of g from
     * there on wait for their next token (staged_n of them, at most k + 1); draft_from is the
     * first position the target's next pass runs on trial (INT_MAX: none); off: no Eagle3
     * proposals until a reset */
    float *staged;
    int *staged_from, *staged_n, *draft_from;
    bool *off;
    int k1; /* staged rows a slot holds: k + 1 */
} eagle3_state;

/* Queues the pair (token, hidden row) at position pos of sequence seq into the next draft pass. */
static void queue(loom_speculator *s, int *nt, int32_t token, int pos, int seq, const float *row) {
    eagle3_state *e = s->eagle3;
    s->ids[*nt] = token, s->pos[*nt] = pos, s->seq[*nt] = seq;
    memcpy(e->in + (size_t)*nt * e->hidden, row, (size_t)e->hidden * sizeof *row);
    ++*nt;
}

static int run(loom_speculator *s, int nt, int nl, const float **logits, loom_err *err) {
    loom_batch b = {nt, s->ids, s->pos, s->seq, nl, s->rows, NULL};
    return engine_forward_rows(s->draft, &b, s->eagle3->in, logits, err) ? loom_err_prefix(err, "the Eagle3 draft") : 0;
}

/* The target's pass b just ran: fc of its captured rows, the pairs that are settled fed to the
 * draft, the rest staged. */
static int eagle3_after_pass(void *user, const loom_batch *b, loom_err *err) {
    loom_speculator *s = user;
    eagle3_state *e = s->eagle3;
    int width, T = b->n_tokens, th = e->th;
    for (int j = 0; j < 3; j++) {
        const float *c = engine_captured(s->target, j, &width);
        for (int t = 0; t < T; t++) memcpy(e->aux + ((size_t)t * 3 + j) * th, c + (size_t)t * width, th * sizeof *c);
    }
    linear(e->aux, (size_t)3 * th, T, T, &e->fc, NULL, e->g, e->hidden);
    int nt = 0;
    for (int r0 = 0, r = 0; r < T; r++) {
        if (r + 1 < T && b->seq[r + 1] == b->seq[r]) continue;
        int seq = b->seq[r], p0 = b->pos[r0], p1 = b->pos[r];
        float *staged = e->staged + (size_t)seq * e->k1 * e->hidden;
        if (e->off[seq] || p0 != e->staged_from[seq] + e->staged_n[seq] || e->staged_n[seq] > 1) {
            e->off[seq] = true; /* states of positions this rank never saw (a cached prefix) */
        } else if (loom_engine_truncate_seq(s->draft, seq, e->staged_from[seq], err)) { /* past proposals' */
            return loom_err_prefix(err, "the Eagle3 draft");
        } else {
            int settled = p1 < e->draft_from[seq] - 1 ? p1 : e->draft_from[seq] - 1; /* its next token known */
            for (int q = e->staged_from[seq]; q < settled; q++) {
                if (nt == s->draft_max_tokens) {
                    const float *lg;
                    if (run(s, nt, 0, &lg, err)) return -1;
                    nt = 0;
                }
                const float *row = q < p0 ? staged : e->g + (size_t)(r0 + q - p0) * e->hidden;
                queue(s, &nt, b->ids[r0 + q + 1 - p0], q, seq, row);
            }
            int from = settled > e->staged_from[seq] ? settled : e->staged_from[seq];
            e->staged_from[seq] = from;
            e->staged_n[seq] = p1 - from + 1 < e->k1 ? p1 - from + 1 : e->k1;
            for (int i = 0; i < e->staged_n[seq]; i++)
                memcpy(staged + (size_t)i * e->hidden, e->g + (size_t)(r0 + from - p0 + i) * e->hidden,
                       (size_t)e->hidden * sizeof *e->g);
        }
        e->draft_from[seq] = INT_MAX;
        r0 = r + 1;
    }
    const float *lg;
    return nt ? run(s, nt, 0, &lg, err) : 0;
}

/* The draft's pick of logits row r: its greedy token, as a target id. */
static int32_t pick(const loom_speculator *s, const float *logits, int r) {
    int32_t d = logits_argmax(logits + (size_t)r * s->draft_vocab, s->draft_vocab);
    return d + s->eagle3->d2t[d];
}

static int eagle3_propose(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist, const int *len,
                          const int *max_draft, int32_t *drafts, int *n_draft, loom_err *err) {
    eagle3_state *e = s->eagle3;
    int k = s->o.num_speculative_tokens, nt = 0, nl = 0, most = 0, width;
    int32_t next[n > 0 ? n : 1];
    int row_of[n > 0 ? n : 1];
    /* the first pass: each sequence's staged rows with the tokens now settled after them */
    for (int i = 0; i < n; i++) {
        int seq = seqs[i], from = e->staged_from[seq], last = len[i] - 2;
        n_draft[i] = 0, row_of[i] = -1;
        s->fed[i] = max_draft[i] < s->draft_ctx - len[i] ? max_draft[i] : s->draft_ctx - len[i];
        if (e->off[seq] || last < from || last >= from + e->staged_n[seq]) {
            s->fed[i] = 0; /* nothing settled to draft from (the target has not run its last token) */
            continue;
        }
        if (loom_engine_truncate_seq(s->draft, seq, from, err)) return loom_err_prefix(err, "the Eagle3 draft");
        if (nt + (last - from + 1) > s->draft_max_tokens) { /* cannot happen: at most k + 1 rows each */
            s->fed[i] = 0;
            continue;
        }
        for (int q = from; q <= last; q++)
            queue(s, &nt, hist[i][q + 1], q, seq, e->staged + ((size_t)seq * e->k1 + q - from) * e->hidden);
        e->staged_from[seq] = last + 1, e->staged_n[seq] = 0;
        if (s->fed[i] > 0) s->rows[nl] = nt - 1, row_of[i] = nl++;
        if (s->fed[i] > most) most = s->fed[i];
    }
    const float *logits;
    if (nt && run(s, nt, nl, &logits, err)) return -1;
    /* then one token a pass, on the draft's own last state */
    for (int j = 0; j < most; j++) {
        const float *last = engine_captured(s->draft, 0, &width);
        int nq = 0;
        for (int i = 0; i < n; i++) {
            if (j >= s->fed[i]) continue;
            next[i] = pick(s, logits, row_of[i]);
            drafts[(size_t)i * k + j] = next[i];
            n_draft[i] = j + 1;
            if (j + 1 == s->fed[i]) continue;
            s->rows[nq] = nq;
            queue(s, &nq, next[i], len[i] - 1 + j, seqs[i], last + (size_t)row_of[i] * width);
            row_of[i] = nq - 1;
        }
        if (nq && run(s, nq, nq, &logits, err)) return -1;
    }
    for (int i = 0; i < n; i++) e->draft_from[seqs[i]] = n_draft[i] ? len[i] : INT_MAX;
    return 0;
}

static void eagle3_reset_seq(loom_speculator *s, int seq) {
    eagle3_state *e = s->eagle3;
    loom_engine_reset_seq(s->draft, seq);
    e->staged_from[seq] = e->staged_n[seq] = 0;
    e->draft_from[seq] = INT_MAX;
    e->off[seq] = false;
}

static void eagle3_free(loom_speculator *s) {
    eagle3_state *e = s->eagle3;
    if (s->target->after_pass_user == s) s->target->after_pass = NULL, s->target->after_pass_user = NULL;
    loom_engine_free(s->draft);
    free(s->ids), free(s->pos), free(s->seq), free(s->rows), free(s->fed);
    if (!e) return;
    free(e->d2t), free(e->aux), free(e->g), free(e->in), free(e->staged);
    free(e->staged_from), free(e->staged_n), free(e->draft_from), free(e->off);
    free(e);
}

static const proposer eagle3_proposer = {eagle3_propose, eagle3_reset_seq, eagle3_free};

/* d2t as the checkpoint holds it (int64 offsets), or none where the vocabularies are one. */
static int read_d2t(eagle3_state *e, loom_model *draft, int vocab, loom_err *err) {
    const model_config *c = &draft->cfg;
    const char *file;
    const st_tensor *t = weights_tensor(&draft->ws, "d2t", &file);
    if (!(e->d2t = mem_zalloc(c->head_vocab, sizeof *e->d2t, "the draft's vocabulary map", err))) return -1;
    if (!t) {
        if (c->head_vocab == vocab || draft->ws.dummy) return 0;
        return loom_errf(err, "%s: the Eagle3 draft's vocabulary of %d is not the target's %d, and it holds no d2t",
                         draft->source, c->head_vocab, vocab);
    }
    if (t->dtype != DT_I64 || t->ndim != 1 || t->shape[0] != (int64_t)c->head_vocab)
        return loom_errf(err, "%s: d2t must be int64 [%d] (draft_vocab_size), not as stored", file, c->head_vocab);
    for (int i = 0; i < c->head_vocab; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * (size_t)i, 8);
        if (v < 0 || i + v >= vocab)
            return loom_errf(err, "%s: d2t[%d] = %lld maps outside the target's vocabulary of %d", file, i,
                             (long long)v, vocab);
        e->d2t[i] = (int32_t)v;
    }
    return 0;
}

int eagle3_init(loom_speculator *s, loom_model *draft, const loom_engine_options *eo, loom_err *err) {
    s->p = &eagle3_proposer; /* from here on, loom_speculator_free cleans up */
    const model_config *c = &draft->cfg, *tc = &s->target->model->cfg;
    int width;
    if (!c->eagle3.on) return loom_errf(err, "%s: not an Eagle3 draft (its config names %s)", draft->source, c->arch);
    for (int j = 0; j < 3; j++)
        if (!engine_captured(s->target, j, &width))
            return loom_errf(err, "the target engine keeps no hidden states for the Eagle3 draft: build it with "
                                  "loom_spec_engine_options");
    eagle3_state *e = s->eagle3 = mem_zalloc(1, sizeof *e, "the Eagle3 state", err);
    if (!e || draft_engine_new(s, draft, eo, true, err)) return -1;
    e->hidden = c->hidden, e->th = tc->hidden, e->k1 = s->o.num_speculative_tokens + 1;
    int t = s->draft_max_tokens, seqs = s->draft->max_seqs;
    const char *what = "the Eagle3 draft's rows";
    if (weights_get(&draft->ws, "fc.weight", c->hidden, 3 * tc->hidden, 0, 0, 0, 0, false, 0.02f, &e->fc, err) ||
        read_d2t(e, draft, tc->vocab, err) ||
        !(e->aux = mem_array((size_t)t * 3 * tc->hidden, sizeof *e->aux, what, err)) ||
        !(e->g = mem_array((size_t)t * c->hidden, sizeof *e->g, what, err)) ||
        !(e->in = mem_array((size_t)t * c->hidden, sizeof *e->in, what, err)) ||
        !(e->staged = mem_array((size_t)seqs * e->k1 * c->hidden, sizeof *e->staged, what, err)) ||
        !(e->staged_from = mem_zalloc(seqs, sizeof *e->staged_from, what, err)) ||
        !(e->staged_n = mem_zalloc(seqs, sizeof *e->staged_n, what, err)) ||
        !(e->draft_from = mem_array(seqs, sizeof *e->draft_from, what, err)) ||
        !(e->off = mem_zalloc(seqs, sizeof *e->off, what, err)))
        return loom_err_prefix(err, "%s", draft->source);
    for (int i = 0; i < seqs; i++) e->draft_from[i] = INT_MAX;
    s->target->after_pass = eagle3_after_pass, s->target->after_pass_user = s;
    return 0;
}
