/* Experts across a stage's ranks at run time: one MoE step of an expert region (plan/ep.c).
 *
 * Expert parallelism: this rank routes its own token rows, sends each row once to every rank
 * owning one of its experts (the row carries the experts it wants there and their weights), runs
 * its own experts over what arrives, and sends back, per received row, the weighted sum of that
 * rank's experts. Each token then adds the sums it gets back in rank order (with the default
 * contiguous placement, the order of its experts' indices grouped by owner): fixed for a given
 * placement, whatever order the rows arrive in, and the same with and without sequence
 * parallelism. Sending a row once per owning rank rather than once per expert, and one sum back,
 * keeps the bytes at most min(top_k, ranks) rows each way per token.
 *
 * Sliced experts (data parallelism without expert parallelism; vLLM's naive dispatch): every rank
 * holds a share of every expert's features, so every rank computes on every replica's rows. Each
 * rank routes its own rows and the rows, with their experts and weights, are all-gathered over
 * the stage's ranks (the counts known from the engine's lockstep); each rank's partial sums go
 * back to each row's owner in an all-to-all, which adds them in rank order. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "runtime/expert_parallel.h"
#include "util/alloc.h"
#include "util/err.h"

static int round_up(int n, int k) { return (n + k - 1) / k * k; }

/* One dispatched row: the token's hidden state, then for each of its top_k slots the local
 * index of an expert on the destination (-1: none) and, after those, their weights. */
static int row_width(const moe_desc *d) { return d->hidden + 2 * d->top_k; }

int ep_init(expert_parallel *x, const plan *p, int ranks, int tp, int max_tokens, size_t *bytes, loom_err *err) {
    int widest = 0, hidden = 0, k = 0, n = ranks, experts = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != STEP_EP_MOE) continue;
        x->n_layers++;
        widest = row_width(s->op->moe) > widest ? row_width(s->op->moe) : widest;
        hidden = s->op->moe->hidden > hidden ? s->op->moe->hidden : hidden;
        k = s->op->moe->top_k > k ? s->op->moe->top_k : k;
        experts = s->op->moe->n_experts > experts ? s->op->moe->n_experts : experts;
    }
    if (!x->n_layers) return 0;
    x->load_width = experts;
    /* a rank holds at most T_pad/tp rows, sends each at most once to each rank, and receives at
     * most as many from each */
    size_t shard = (size_t)round_up(max_tokens, tp) / tp, rows = shard * n;
    x->max_rows = (int)rows;
    const char *what = "expert parallelism's buffers";
    size_t floats = rows * (2 * (size_t)widest + 2 * hidden);
    if (!(x->choice = mem_array(shard * k, sizeof *x->choice, what, err)) ||
        !(x->copy = mem_array(shard * k, sizeof *x->copy, what, err)) ||
        !(x->weight = mem_array(shard * k, sizeof *x->weight, what, err)) ||
        !(x->local_choice = mem_array(rows * k, sizeof *x->local_choice, what, err)) ||
        !(x->local_weight = mem_array(rows * k, sizeof *x->local_weight, what, err)) ||
        !(x->row_at = mem_array(shard * n, sizeof *x->row_at, what, err)) ||
        !(x->send_rows = mem_zalloc(n, sizeof *x->send_rows, what, err)) ||
        !(x->recv_rows = mem_zalloc(n, sizeof *x->recv_rows, what, err)) ||
        !(x->start = mem_zalloc(n + 1, sizeof *x->start, what, err)) ||
        !(x->name = mem_zalloc(x->n_layers, sizeof *x->name, what, err)) ||
        !(x->received = mem_zalloc((size_t)x->n_layers * n, sizeof *x->received, what, err)) ||
        !(x->bytes = mem_zalloc(x->n_layers, sizeof *x->bytes, what, err)) ||
        !(x->load = mem_zalloc((size_t)x->n_layers * experts, sizeof *x->load, what, err)) ||
        !(x->send = mem_array(rows * widest, sizeof(float), what, err)) ||
        !(x->recv = mem_array(rows * widest, sizeof(float), what, err)) ||
        !(x->sums = mem_array(rows * hidden, sizeof(float), what, err)) ||
        !(x->back = mem_array(rows * hidden, sizeof(float), what, err)))
        return -1;
    *bytes += floats * sizeof(float);
    return 0;
}

void ep_free(expert_parallel *x) {
    free(x->choice), free(x->copy), free(x->weight), free(x->local_choice), free(x->local_weight), free(x->row_at);
    free(x->send_rows), free(x->recv_rows), free(x->start), free(x->name), free(x->received), free(x->bytes);
    free(x->load);
    free(x->send), free(x->recv), free(x->sums), free(x->back);
    memset(x, 0, sizeof *x);
}

void ep_reset_stats(expert_parallel *x, int ranks) {
    if (!x->n_layers) return;
    memset(x->received, 0, (size_t)x->n_layers * ranks * sizeof *x->received);
    memset(x->bytes, 0, x->n_layers * sizeof *x->bytes);
    memset(x->load, 0, (size_t)x->n_layers * x->load_width * sizeof *x->load);
    x->passes = 0;
    x->waited_s = 0;
}

void ep_begin_pass(expert_parallel *x) {
    x->layer = 0;
    x->passes += x->n_layers > 0;
}

/* Packs this rank's `real` routed rows for their owners, grouped by destination in rank order,
 * tokens in order within each; row_at[i * n + d]: where token i's row for rank d went (-1). An
 * expert with several copies gets its tokens in turn by row and rank (copy[i * k + j]: the copy
 * token i's j-th expert goes to), the same rows with and without sequence parallelism. */
static void pack_dispatch(expert_parallel *x, const plan_step *s, const float *in, size_t ld, int real, int n,
                          int rank) {
    const moe_desc *d = s->op->moe;
    const placement *pl = &s->place;
    int k = d->top_k, H = d->hidden, W = row_width(d);
    memset(x->send_rows, 0, n * sizeof *x->send_rows);
    for (int i = 0; i < real; i++) {
        for (int r = 0; r < n; r++) x->row_at[(size_t)i * n + r] = -1;
        for (int j = 0; j < k; j++) {
            int e = x->choice[(size_t)i * k + j], copies = pl->first[e + 1] - pl->first[e];
            int c = x->copy[(size_t)i * k + j] = pl->first[e] + (i + rank) % copies, r = pl->owner[c];
            if (x->row_at[(size_t)i * n + r] < 0) x->row_at[(size_t)i * n + r] = x->send_rows[r]++;
        }
    }
    int *start = x->start;
    start[0] = 0;
    for (int r = 0; r < n; r++) start[r + 1] = start[r] + x->send_rows[r];
    for (int i = 0; i < real; i++)
        for (int r = 0; r < n; r++) {
            int at = x->row_at[(size_t)i * n + r];
            if (at < 0) continue;
            at = x->row_at[(size_t)i * n + r] = start[r] + at;
            float *row = x->send + (size_t)at * W;
            memcpy(row, in + (size_t)i * ld, H * sizeof *row);
            int m = 0;
            for (int j = 0; j < k; j++) {
                int c = x->copy[(size_t)i * k + j];
                if (pl->owner[c] != r) continue;
                row[H + m] = (float)pl->local[c];
                row[H + k + m++] = x->weight[(size_t)i * k + j];
            }
            for (; m < k; m++) row[H + m] = -1, row[H + k + m] = 0;
        }
}

/* Per MoE layer: rows each rank received, and bytes that crossed between ranks both ways. */
static void count_layer(expert_parallel *x, const loom_comm *c, const moe_desc *d) {
    int n = c->size, layer = x->layer;
    for (int s = 0; s < n; s++)
        for (int r = 0; r < n; r++) {
            long rows = comm_a2a_rows(c, s, r);
            x->received[(size_t)layer * n + r] += rows;
            if (s != r) x->bytes[layer] += (double)rows * (row_width(d) + d->hidden) * sizeof(float);
        }
}

/* Runs the experts s holds over the `got` received rows of x->recv (each carrying its experts'
 * indices on this rank and their weights) into x->sums, counting the work. */
static void run_received(expert_parallel *x, const plan_step *s, moe_shape sh, int got, moe_scratch *scratch,
                         expert_work *work) {
    const moe_desc *d = s->op->moe;
    int k = d->top_k, H = d->hidden, W = row_width(d);
    double t0 = omp_get_wtime();
    for (int i = 0; i < got; i++)
        for (int j = 0; j < k; j++) {
            const float *row = x->recv + (size_t)i * W;
            x->local_choice[(size_t)i * k + j] = (int32_t)row[H + j];
            x->local_weight[(size_t)i * k + j] = row[H + k + j];
        }
    sh.n_experts = s->n_experts;
    moe_experts(&sh, s->experts, x->recv, W, got, x->local_choice, x->local_weight, x->sums, H, scratch);
    long pairs = 0;
    for (int i = 0; i < got * k; i++) pairs += x->local_choice[i] >= 0;
    work->flop += 6.0 * H * s->expert_inter * pairs; /* gate, up and down: 2 flops per weight */
    work->pairs += pairs;
    work->seconds += omp_get_wtime() - t0;
}

/* Expert parallelism: dispatch this rank's `real` routed rows to their experts' owners, run
 * this rank's experts, combine; back[row_at[i * n + r]] is then token i's sum from rank r. */
static int dispatch_combine(expert_parallel *x, loom_comm *c, moe_scratch *scratch, const plan_step *s,
                            const moe_shape *sh, const float *in, size_t ldx, int real, expert_work *work,
                            loom_err *err) {
    const moe_desc *d = s->op->moe;
    int n = c->size, H = d->hidden, W = row_width(d);
    pack_dispatch(x, s, in, ldx, real, n, c->rank);
    loom_comm_set_phase(c, "expert dispatch in %s", s->mod->name);
    if (comm_all_to_all_rows(c, x->send, W, x->send_rows, W, x->recv, W, x->max_rows, x->recv_rows, err)) return -1;
    if (x->layer < x->n_layers) {
        x->name[x->layer] = s->mod->name;
        count_layer(x, c, d);
    }
    int got = 0;
    for (int r = 0; r < n; r++) got += x->recv_rows[r];
    run_received(x, s, *sh, got, scratch, work);
    loom_comm_set_phase(c, "expert combine in %s", s->mod->name);
    return comm_all_to_all_rows(c, x->sums, H, x->recv_rows, H, x->back, H, x->max_rows, x->send_rows, err);
}

/* Sliced experts: gather every rank's routed rows, run this rank's share of every expert over
 * them, and send each owner its rows' partial sums; back[r * real + i] is then token i's
 * partial from rank r, and row_at says so. */
static int gather_scatter(expert_parallel *x, loom_comm *c, int tp, moe_scratch *scratch, const plan_step *s,
                          const moe_shape *sh, const float *in, size_t ldx, int real, expert_work *work,
                          loom_err *err) {
    const moe_desc *d = s->op->moe;
    int n = c->size, k = d->top_k, H = d->hidden, W = row_width(d), got = 0;
    /* rank r's rows: its block of its replica's tokens, as ep_moe_step computes its own */
    for (int r = 0; r < n; r++) {
        int tokens = (int)x->rank_tokens[comm_world_rank(c, r)], block = round_up(tokens, tp) / tp;
        int rows = tokens - r % tp * block;
        x->recv_rows[r] = rows < 0 ? 0 : rows > block ? block : rows;
        x->start[r] = got * W, x->send_rows[r] = x->recv_rows[r] * W;
        got += x->recv_rows[r];
    }
    for (int i = 0; i < real; i++) {
        float *row = x->send + (size_t)i * W;
        memcpy(row, in + (size_t)i * ldx, H * sizeof *row);
        for (int j = 0; j < k; j++) row[H + j] = (float)x->choice[(size_t)i * k + j];
        for (int j = 0; j < k; j++) row[H + k + j] = x->weight[(size_t)i * k + j];
    }
    loom_comm_set_phase(c, "gathering every replica's rows in %s", s->mod->name);
    if (comm_all_gather_cols(c, x->send, 0, x->recv, 0, 1, x->start, x->send_rows, err)) return -1;
    run_received(x, s, *sh, got, scratch, work);
    for (int r = 0; r < n; r++) x->send_rows[r] = x->recv_rows[r];
    loom_comm_set_phase(c, "reduce-scattering the experts' sums in %s", s->mod->name);
    if (comm_all_to_all_rows(c, x->sums, H, x->send_rows, H, x->back, H, x->max_rows, x->recv_rows, err)) return -1;
    for (int i = 0; i < real; i++)
        for (int r = 0; r < n; r++) x->row_at[(size_t)i * n + r] = r * real + i;
    if (x->layer < x->n_layers) { /* every rank computes every row; bytes: the gather and the sums */
        x->name[x->layer] = s->mod->name;
        for (int r = 0; r < n; r++) x->received[(size_t)x->layer * n + r] += got;
        x->bytes[x->layer] += (double)(n - 1) * got * (W + H) * sizeof(float);
    }
    return 0;
}

int ep_moe_step(expert_parallel *x, loom_comm *c, const loom_comm *tp, moe_scratch *scratch, const plan_step *s,
                const moe_shape *route, const float *in, size_t ldx, const float *logits, size_t ldl, float *out,
                size_t ldo, int n_tokens, expert_work *work, double *comm_s, loom_err *err) {
    const moe_desc *d = s->op->moe;
    int n = c->size, shard = round_up(n_tokens, tp->size) / tp->size, k = d->top_k, H = d->hidden;
    int real = n_tokens - tp->rank * shard;
    real = real < 0 ? 0 : real > shard ? shard : real; /* rows past the batch are padding */
    moe_shape sh = *route;
    moe_route(logits, ldl, real, &sh, x->choice, x->weight);
    for (int i = 0; i < real * k && x->layer < x->n_layers; i++) /* the load profile (placement.c) */
        if (x->choice[i] >= 0) x->load[(size_t)x->layer * x->load_width + x->choice[i]]++;
    double t0 = omp_get_wtime(), blocked0 = c->blocked_s, computed0 = work->seconds;
    if (s->experts_sliced ? gather_scatter(x, c, tp->size, scratch, s, &sh, in, ldx, real, work, err)
                          : dispatch_combine(x, c, scratch, s, &sh, in, ldx, real, work, err))
        return -1;
    *comm_s += omp_get_wtime() - t0 - (work->seconds - computed0);
    x->waited_s += c->blocked_s - blocked0;
    /* each token: the sums from its ranks in rank order (the first copied, as every reduction here) */
    for (int i = 0; i < shard; i++) {
        float *o = out + (size_t)i * ldo;
        bool first = true;
        for (int r = 0; r < n && i < real; r++) {
            int at = x->row_at[(size_t)i * n + r];
            if (at < 0) continue;
            if (first) memcpy(o, x->back + (size_t)at * H, H * sizeof *o);
            else cpu()->add(o, x->back + (size_t)at * H, o, H);
            first = false;
        }
        if (first) memset(o, 0, H * sizeof *o);
    }
    x->layer++;
    return 0;
}

void ep_print(const expert_parallel *x, const expert_work *w, int rank, int n, FILE *f, bool per_layer) {
    if (w->seconds > 0)
        fprintf(f, "experts (rank %d): %.1f GFLOP/s in their GEMMs, %.3f s\n", rank, w->flop / w->seconds / 1e9,
                w->seconds);
    if (!x->n_layers || !x->passes) return;
    fprintf(f, "expert parallelism: rows received per rank in each MoE layer over %ld passes%s\n", x->passes,
            per_layer ? "" : " (all layers)");
    double worst = 0, mean_imb = 0, bytes = 0;
    long *total = mem_zalloc(n, sizeof *total, "the report's totals", NULL);
    if (!total) return;
    int worst_at = 0;
    for (int l = 0; l < x->n_layers; l++) {
        long most = 0, sum = 0;
        for (int r = 0; r < n; r++) {
            long v = x->received[(size_t)l * n + r];
            most = v > most ? v : most, sum += v, total[r] += v;
        }
        double imb = sum ? most * (double)n / sum : 1;
        mean_imb += imb / x->n_layers, bytes += x->bytes[l] / x->n_layers;
        if (imb > worst) worst = imb, worst_at = l;
        if (!per_layer) continue;
        fprintf(f, "  %-28s", x->name[l] ? x->name[l] : "?");
        for (int r = 0; r < n; r++) fprintf(f, " rank %d: %ld", r, x->received[(size_t)l * n + r]);
        fprintf(f, "  imbalance (max/mean) %.3f, %.2f MiB between ranks per pass\n", imb,
                x->bytes[l] / x->passes / 1048576.0);
    }
    fprintf(f, "  per layer:");
    for (int r = 0; r < n; r++) fprintf(f, " rank %d %.1f rows", r, (double)total[r] / x->n_layers / x->passes);
    fprintf(f, " per pass; imbalance mean %.3f, worst %.3f (%s); %.2f MiB between ranks per layer per pass\n", mean_imb,
            worst, x->name[worst_at] ? x->name[worst_at] : "?", bytes / x->passes / 1048576.0);
    free(total);
}
