/* libFuzzer target: the tool-call parsers (src/serve/tool_calls.c), which read what a model
 * writes. The first byte picks the family, the rest is the output. It is parsed whole and fed
 * as a stream in chunks the input's bytes choose; both must give the same calls and content,
 * and every item must lie inside the text fed so far. */
#include <stdlib.h>
#include <string.h>

#include "serve/tool_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    tool_parser p = (tool_parser)(TOOL_PARSER_HERMES + data[0] % TOOL_PARSER_PYTHONIC);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (memchr(text, 0, len)) return 0; /* the whole parse's content is a C string */
    tool_parse whole;
    loom_err err;
    if (tool_calls_parse(p, text, len, 1 << 20, &whole, &err)) return 0;
    char *content = malloc(len + 1);
    size_t clen = 0, upto = 0;
    int calls = 0;
    tool_stream s = {.parser = p};
    for (size_t step = 0;; step++) {
        bool done = upto == len;
        tool_item it;
        int rc;
        while ((rc = tool_stream_next(&s, text, upto, done, &it, &err)) == 1) {
            if (it.from > it.to || it.to > upto) abort();
            if (it.is_call) {
                if (calls >= whole.n_calls || strcmp(it.name, whole.calls[calls].name) ||
                    strcmp(it.arguments, whole.calls[calls].arguments))
                    abort();
                calls++;
                free(it.name);
                free(it.arguments);
            } else {
                memcpy(content + clen, text + it.from, it.to - it.from);
                clen += it.to - it.from;
            }
        }
        if (rc < 0 || done) break;
        upto += 1 + (size_t)(data[step % size] % 7);
        if (upto > len) upto = len;
    }
    content[clen] = 0;
    if (calls != whole.n_calls) abort();
    if (whole.content ? strlen(whole.content) != clen || memcmp(whole.content, content, clen) : calls == 0 && clen)
        abort();
    free(content);
    tool_parse_free(&whole);
    return 0;
}
