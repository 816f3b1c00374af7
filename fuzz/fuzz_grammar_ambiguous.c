/* libFuzzer target: grammars ambiguous by construction, walked long, against the matcher's bound
 * of work (issue 49). The input builds `s ::= A1 s B1 | ... | An s Bn | ""` (root ::= s), each
 * Ai a set of bytes and Bi a byte from it, so every alternative may match the same text at every
 * level, then steers a walk of up to 256 tokens over a vocabulary of single bytes and runs of up
 * to 16. Every operation (mask, check, step) must end, going on or with the "too ambiguous"
 * error, within STEP_SECONDS: one that runs longer means work the bound does not count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"

#define VOCAB        321 /* 256 bytes, 64 runs, EOS */
#define EOS          320
#define STEP_SECONDS 5.0 /* the bound's few milliseconds, under the sanitizers and the fuzzer's coverage */

static grammar_vocab *vocab(void) {
    static char store[256], runs[64][17];
    const char *bytes[VOCAB];
    int lens[VOCAB];
    for (int i = 0; i < 256; i++) store[i] = (char)i, bytes[i] = &store[i], lens[i] = 1;
    for (int i = 0; i < 64; i++) { /* runs of 2 to 16 of the letters and brackets */
        int n = 2 + i % 15;
        memset(runs[i], "ab[{(x0 "[i % 8], (size_t)n);
        bytes[256 + i] = runs[i], lens[256 + i] = n;
    }
    bytes[EOS] = "", lens[EOS] = -1;
    int32_t eos = EOS;
    return grammar_vocab_new(VOCAB, bytes, lens, &eos, 1, NULL);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void timed(double t0, const char *what) {
    if (now() - t0 <= STEP_SECONDS) return;
    fprintf(stderr, "fuzz_grammar_ambiguous: one %s took %.1f s: past the matcher's bound\n", what, now() - t0);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static grammar_vocab *v;
    if (!v && !(v = vocab())) return 0;
    if (size < 3) return 0;
    int alts = 2 + data[0] % 7, at = 1;
    gbuf g = {0};
    gbuf_puts(&g, "root ::= s\ns ::= ");
    for (int a = 0; a < alts; a++) { /* Ai: a class of up to 4 bytes; Bi: its first */
        int n = 1 + (at < (int)size ? data[at++] % 4 : 0);
        gbuf_puts(&g, "[");
        for (int k = 0; k < n; k++) gbuf_printf(&g, "\\x%02X", at < (int)size ? data[at++] : 'a');
        gbuf_printf(&g, "] s \"\\x%02X\" | ", at < (int)size ? data[at - n] : 'a');
    }
    gbuf_puts(&g, "\"\"\n");
    loom_err err;
    grammar *gr = g.p ? grammar_compile(g.p, v, &err) : NULL;
    grammar_matcher *m = gr ? grammar_matcher_new(gr, &err) : NULL;
    uint32_t allowed[(VOCAB + 31) / 32];
    for (int step = 0; m && step < 256 && at < (int)size; step++) {
        double t0 = now();
        int masked = data[at] & 1 ? grammar_matcher_mask(m, allowed, &err) : 0;
        timed(t0, "mask");
        if (masked) break; /* past the bound: the request would end here */
        int32_t tok = data[at++] % EOS;
        t0 = now();
        bool ok = grammar_matcher_allows(m, tok);
        timed(t0, "check");
        if (!ok) continue;
        t0 = now();
        int failed = grammar_matcher_accept(m, tok, &err);
        timed(t0, "step");
        if (failed) break;
    }
    grammar_matcher_free(m);
    grammar_unref(gr);
    gbuf_free(&g);
    return 0;
}
