/* Tokenizes texts with the tokenizer of a GGUF file, for tests/gguf_vocab.py:
 *   gguf_tokenize FILE.gguf [--special] < texts.json
 * reads a JSON list of strings and prints one line of space-separated ids per string
 * (--special: with the BOS/EOS the file asks for), then the load time on stderr. A file whose
 * tokenizer loom refuses prints "refused: MESSAGE" and exits 3. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/gguf_vocab.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gguf_tokenize FILE.gguf [--special] < texts.json\n");
        return 2;
    }
    bool special = argc > 2 && !strcmp(argv[2], "--special");
    size_t cap = 1 << 16, len = 0, got;
    char *in = malloc(cap);
    while (in && (got = fread(in + len, 1, cap - len, stdin)) > 0)
        if ((len += got) == cap) in = realloc(in, cap *= 2);
    cJSON *texts = in ? cJSON_ParseWithLength(in, len) : NULL;
    free(in);
    if (!cJSON_IsArray(texts)) {
        fprintf(stderr, "gguf_tokenize: stdin is not a JSON list of strings\n");
        cJSON_Delete(texts);
        return 2;
    }
    loom_err err = {{0}};
    gguf_file f = {0};
    if (gguf_open(&f, argv[1], &err)) {
        fprintf(stderr, "gguf_tokenize: %s\n", err.msg);
        cJSON_Delete(texts);
        return 2;
    }
    double t0 = now();
    tokenizer *t = gguf_tokenizer(&f, &err);
    double dt = now() - t0;
    if (!t) {
        printf("refused: %s\n", err.msg);
        gguf_close(&f);
        cJSON_Delete(texts);
        return 3;
    }
    int rc = 0;
    for (const cJSON *s = texts->child; s; s = s->next) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *text = cJSON_IsString(s) ? s->valuestring : "";
        if (tokenizer_encode(t, text, strlen(text), special, &ids, &n, &err)) {
            printf("error: %s\n", err.msg);
            rc = 1;
            continue;
        }
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        free(ids);
    }
    fprintf(stderr, "load %.1f ms, %d ids\n", 1e3 * dt, tokenizer_vocab_size(t));
    tokenizer_free(t);
    gguf_close(&f);
    cJSON_Delete(texts);
    return rc;
}
