/* Generates text with libloom through include/loom.h alone: loads a model (the embedded
 * stories260K, or the Hugging Face folder given as argv[1]), builds an engine, tokenizes a
 * prompt (argv[2], else "Once upon a time") and generates 32 tokens greedily, printing each
 * piece as it comes. Built against an installed loom: see README.md here. */
#include <loom.h>
#include <stdio.h>
#include <stdlib.h>

enum { NEW_TOKENS = 32 };

static bool print_piece(void *user, int32_t id, const char *piece, size_t len) {
    (void)user, (void)id;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

int main(int argc, char **argv) {
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    loom_err err = {{0}};
    loom_model_options mo = {.path = argc > 1 ? argv[1] : NULL, .load_tokenizer = true};
    loom_model *model = loom_model_load(&mo, &err);
    if (!model) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    loom_engine *engine = NULL;
    int rc = loom_tokenize(model, prompt, true, &ids, &n, &err);
    if (!rc) {
        /* A KV cache for this prompt and its continuation only, not the default budget. */
        loom_engine_options eo = {.max_seqs = 1, .max_ctx = (int)n + NEW_TOKENS};
        engine = loom_engine_new(model, &eo, &err);
        rc = engine ? 0 : -1;
    }
    if (!rc) {
        loom_sampling greedy = {.temperature = 0, .top_p = 1};
        loom_gen_stats stats;
        printf("loom %s: %s", loom_version(), prompt);
        rc = loom_generate(engine, ids, (int)n, NEW_TOKENS, &greedy, print_piece, NULL, &stats, &err);
        if (!rc) printf("\n(%d prompt tokens, %d generated)\n", stats.prompt_tokens, stats.generated);
    }
    if (rc) fprintf(stderr, "generate: %s\n", err.msg);
    loom_engine_free(engine);
    free(ids);
    loom_model_free(model);
    return rc ? 1 : 0;
}
