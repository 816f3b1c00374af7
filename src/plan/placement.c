/* Expert placement. The default gives rank r a contiguous range of experts (the first E % R
 * ranks one more), which is what every rank computes alike from E and R alone. A router's
 * load is rarely uniform, though: a closing note measured a 54/46 split of
 * the experts' work at 2 ranks, and the slowest rank sets every layer's pace. Given a profile of
 * tokens per expert (bench latency --save-expert-load), each layer's experts are packed greedily,
 * heaviest first onto the least-loaded rank with room, keeping each rank's expert count as the
 * contiguous split has it, so its memory does not grow. Every rank computes the same placement
 * from the same profile, so nothing is exchanged. */
#include "plan/placement.h"

#include <stdlib.h>
#include <string.h>

static int count_on(int n, int ranks, int r) { return n / ranks + (r < n % ranks); }

/* The experts in order of decreasing load (ties: lower index first). */
static void by_load(const double *load, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && load[order[j]] > load[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
}

void placement_make(int n, int ranks, const double *load, int32_t *owner, int32_t *local) {
    if (!load) {
        for (int r = 0, e = 0; r < ranks; r++)
            for (int k = 0; k < count_on(n, ranks, r); k++) owner[e++] = r;
    } else {
        int order[n > 0 ? n : 1], held[ranks];
        double sum[ranks];
        memset(held, 0, sizeof held);
        for (int r = 0; r < ranks; r++) sum[r] = 0;
        by_load(load, n, order);
        for (int i = 0; i < n; i++) {
            int best = -1;
            for (int r = 0; r < ranks; r++)
                if (held[r] < count_on(n, ranks, r) && (best < 0 || sum[r] < sum[best])) best = r;
            owner[order[i]] = best;
            held[best]++;
            sum[best] += load[order[i]];
        }
    }
    int next[ranks];
    memset(next, 0, sizeof next);
    for (int e = 0; e < n; e++) local[e] = next[owner[e]]++;
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

double placement_imbalance(const double *load, int n, int ranks, const int32_t *owner) {
    double per[ranks], total = 0, most = 0;
    for (int r = 0; r < ranks; r++) per[r] = 0;
    for (int e = 0; e < n; e++) per[owner[e]] += load[e], total += load[e];
    for (int r = 0; r < ranks; r++) most = per[r] > most ? per[r] : most;
    return total > 0 ? most * ranks / total : 1;
}
