/* n-gram prompt lookup (vLLM's "ngram" method, after Saxena's prompt-lookup decoding): the
 * proposal is what followed the most recent earlier occurrence of the sequence's last n
 * tokens, for the longest n from prompt_lookup_max down to prompt_lookup_min that occurs. No
 * model runs, so it costs a scan of the history; it pays where the output copies its input
 * (editing, summarising, code). Every rank finds the same proposal from the same tokens. */
#include <string.h>

#include "decode/spec.h"

/* Where the last n tokens of h[0..len) occurred before, most recent first; -1 if nowhere. */
static int last_occurrence(const int32_t *h, int len, int n) {
    const int32_t *tail = h + len - n;
    for (int j = len - n - 1; j >= 0; j--)
        if (h[j] == tail[0] && !memcmp(h + j, tail, (size_t)n * sizeof *h)) return j;
    return -1;
}

static int ngram_propose(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist, const int *len,
                         const int *max_draft, int32_t *drafts, int *n_draft, loom_err *err) {
    (void)seqs, (void)err;
    int k = s->o.num_speculative_tokens;
    for (int i = 0; i < n; i++) {
        n_draft[i] = 0;
        for (int g = s->o.prompt_lookup_max; g >= s->o.prompt_lookup_min && !n_draft[i]; g--) {
            if (g >= len[i]) continue;
            int at = last_occurrence(hist[i], len[i], g);
            if (at < 0) continue;
            int from = at + g, m = len[i] - from; /* what followed it, up to the present */
            m = m < max_draft[i] ? m : max_draft[i];
            memcpy(drafts + (size_t)i * k, hist[i] + from, (size_t)(m > 0 ? m : 0) * sizeof *drafts);
            n_draft[i] = m > 0 ? m : 0;
            if (!m) break; /* nothing may be proposed: a shorter tail would not change that */
        }
    }
    return 0;
}

static void ngram_reset_seq(loom_speculator *s, int seq) { (void)s, (void)seq; }
static void ngram_free(loom_speculator *s) { (void)s; }

const proposer ngram_proposer = {ngram_propose, ngram_reset_seq, ngram_free};
