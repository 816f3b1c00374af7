/* libFuzzer target: the server's request bodies (src/serve/api_request.c), what every client
 * sends. The first byte picks the endpoint (completions, chat completions with a ChatML
 * template, /tokenize, /detokenize), the rest is the body; whatever parses is then answered
 * as the server would (response JSON, stop strings applied to a few tokens). HTTP itself is
 * parsed by libmicrohttpd, which has its own fuzzing upstream. */
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "template/template.h"

static const char chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static server *fuzz_server(void) {
    static server srv;
    static serve_options o = {.served_name = "stories260K", .seed = 1, .max_queue = 256}; /* room for n choices */
    if (srv.m) return &srv;
    loom_err err;
    loom_model_options mo = {.load_tokenizer = true};
    srv.o = &o;
    if (!(srv.m = loom_model_load(&mo, &err))) abort();
    loom_model_get_info(srv.m, &srv.info);
    srv.max_ctx = 512;
    if (!(srv.tmpl.plain = srv.tmpl.tools = chat_template_parse(chatml, "chatml", &err))) abort();
    return &srv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    server *srv = fuzz_server();
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    api_error e;
    char *out = NULL;
    switch (data[0] % 4) {
    case 0:
    case 1: {
        request *r = api_parse_generate(srv, data[0] % 4 ? REQ_CHAT : REQ_COMPLETION, body, len, &e);
        if (!r) break;
        for (int i = 0; i < 4 && i < r->n_prompt; i++) { /* its own prompt as output */
            req_token t = {.id = r->prompt[i], .n_top = r->top_logprobs};
            for (int k = 0; k < t.n_top; k++) t.top_id[k] = r->prompt[(i + k) % r->n_prompt];
            request_add_token(r, &t);
        }
        request_end_text(r);
        r->finish = FINISH_LENGTH;
        out = api_response(srv, r);
        request_unref(r);
        break;
    }
    case 2: out = api_tokenize(srv, body, len, &e); break;
    default: out = api_detokenize(srv, body, len, &e); break;
    }
    free(out);
    return 0;
}
