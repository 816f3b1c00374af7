/* Expert placement. The default gives rank r a contiguous range of experts (the first E % R
 * ranks one more), which is what every rank computes alike from E and R alone. A router's
 * load is rarely uniform, though: a closing note measured a 54/46 split of the experts' work at
 * 2 ranks, and the slowest rank sets every layer's pace. Given a profile of tokens per expert
 * (bench latency --save-expert-load), each layer's experts are packed greedily, heaviest first
 * onto the least-loaded rank with room, keeping each rank's count as a contiguous split has it,
 * so its memory does not grow. One expert hotter than a rank's fair share cannot be packed
 * away, so, as DeepSeek's EPLB does, `redundant` spare copies go to the experts with the most
 * load per copy, and the dispatch spreads an expert's tokens over its copies. Every rank computes
 * the same placement from the same profile, so nothing is exchanged. */
#include "plan/placement.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

static int count_on(int n, int ranks, int r) { return n / ranks + (r < n % ranks); }

/* Copies in order of decreasing load per copy (ties: lower expert, then lower copy first). */
static void by_weight(const double *w, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && w[order[j]] > w[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
}

void placement_free(placement *pl) {
    free(pl->first), free(pl->owner), free(pl->local);
    memset(pl, 0, sizeof *pl);
}

bool placement_holds(const placement *pl, int e, int rank) {
    for (int c = pl->first[e]; c < pl->first[e + 1]; c++)
        if (pl->owner[c] == rank) return true;
    return false;
}

/* Each copy's expert and its load (the expert's, shared among its copies). */
static void copy_weights(const placement *pl, const double *load, int *expert, double *w) {
    for (int e = 0; e < pl->n_experts; e++)
        for (int c = pl->first[e]; c < pl->first[e + 1]; c++)
            expert[c] = e, w[c] = load ? load[e] / (pl->first[e + 1] - pl->first[e]) : 0;
}

/* Packs the copies, heaviest first, onto the least-loaded rank with room that holds no copy of
 * the same expert (any rank with room when every one does). */
static void pack(placement *pl, int ranks, const double *load) {
    int S = pl->n_copies, order[S], expert[S], held[ranks];
    double w[S], sum[ranks];
    copy_weights(pl, load, expert, w);
    by_weight(w, S, order);
    for (int r = 0; r < ranks; r++) held[r] = 0, sum[r] = 0;
    for (int c = 0; c < S; c++) pl->owner[c] = -1;
    for (int i = 0; i < S; i++) {
        int c = order[i], best = -1;
        for (int pass = 0; pass < 2 && best < 0; pass++) /* c is unplaced (-1): placement_holds sees the others */
            for (int r = 0; r < ranks; r++)
                if (held[r] < count_on(S, ranks, r) && !(pass == 0 && placement_holds(pl, expert[c], r)) &&
                    (best < 0 || sum[r] < sum[best]))
                    best = r;
        pl->owner[c] = best;
        held[best]++;
        sum[best] += w[c];
    }
}

int placement_make(placement *pl, int n, int ranks, const double *load, int redundant, loom_err *err) {
    memset(pl, 0, sizeof *pl);
    if (redundant && !load)
        return loom_errf(err,
                         "--num-redundant-experts %d: redundant copies go to the hottest experts, which need a "
                         "load profile of the layer (--expert-load)",
                         redundant);
    if (redundant < 0 || redundant > n * (ranks - 1))
        return loom_errf(err, "--num-redundant-experts %d: from 0 to %d (every one of %d experts on each of %d ranks)",
                         redundant, n * (ranks - 1), n, ranks);
    int S = n + redundant;
    const char *what = "an expert placement";
    if (!(pl->first = mem_zalloc(n + 1, sizeof *pl->first, what, err)) ||
        !(pl->owner = mem_array(S, sizeof *pl->owner, what, err)) ||
        !(pl->local = mem_array(S, sizeof *pl->local, what, err))) {
        placement_free(pl);
        return -1;
    }
    pl->n_experts = n, pl->n_copies = S;
    int copies[n > 0 ? n : 1];
    for (int e = 0; e < n; e++) copies[e] = 1;
    for (int k = 0; k < redundant; k++) { /* the most load per copy, among experts not yet on every rank */
        int best = -1;
        for (int e = 0; e < n; e++)
            if (copies[e] < ranks && (best < 0 || load[e] / copies[e] > load[best] / copies[best])) best = e;
        copies[best]++;
    }
    for (int e = 0; e < n; e++) pl->first[e + 1] = pl->first[e] + copies[e];
    if (!load) {
        for (int r = 0, c = 0; r < ranks; r++)
            for (int k = 0; k < count_on(n, ranks, r); k++) pl->owner[c++] = r;
    } else {
        pack(pl, ranks, load);
    }
    int next[ranks];
    memset(next, 0, sizeof next);
    for (int c = 0; c < S; c++) pl->local[c] = next[pl->owner[c]]++;
    return 0;
}

int placement_load_row(const expert_load *lp, const char *name, int n_experts, const double **row, loom_err *err) {
    *row = NULL;
    for (int l = 0; lp && l < lp->n_layers; l++) {
        if (strcmp(lp->names[l], name)) continue;
        if (lp->n_experts != n_experts)
            return loom_errf(err, "the expert load profile counts %d experts for %s, which has %d", lp->n_experts, name,
                             n_experts);
        *row = lp->count + (size_t)l * lp->n_experts;
    }
    return 0;
}

double placement_imbalance(const double *load, const placement *pl, int ranks) {
    int expert[pl->n_copies > 0 ? pl->n_copies : 1];
    double w[pl->n_copies > 0 ? pl->n_copies : 1], per[ranks], total = 0, most = 0;
    copy_weights(pl, load, expert, w);
    for (int r = 0; r < ranks; r++) per[r] = 0;
    for (int c = 0; c < pl->n_copies; c++) per[pl->owner[c]] += w[c], total += w[c];
    for (int r = 0; r < ranks; r++) most = per[r] > most ? per[r] : most;
    return total > 0 ? most * ranks / total : 1;
}
