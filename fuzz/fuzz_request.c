/* libFuzzer target: the server's request bodies (src/serve/api_*.c), what every client sends.
 * The first byte picks the endpoint (completions, chat completions with a ChatML template,
 * /tokenize, /detokenize, Anthropic's /v1/messages and its count_tokens, /v1/responses,
 * /v1/embeddings, /v1/score, /v1/rerank), the
 * rest is the body; whatever parses is then answered as the server would, whole and as a
 * stream in its API's shape (stop strings applied to a few tokens, tool calls read in the
 * hermes format). A Responses request is stored, so a later input can continue it. HTTP itself
 * is parsed by libmicrohttpd, which has its own fuzzing upstream. */
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/response_store.h"
#include "serve/tool_calls.h"
#include "template/template.h"

static const char chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static server *fuzz_server(void) {
    static server srv;
    static serve_options o = {
        .served_name = "stories260K", .seed = 1, .max_queue = 256, .responses_store_bytes = 1 << 20};
    if (srv.m) return &srv;
    loom_err err;
    loom_model_options mo = {.load_tokenizer = true};
    srv.o = &o;
    if (!(srv.m = loom_model_load(&mo, &err))) abort();
    loom_model_get_info(srv.m, &srv.info);
    srv.max_ctx = 512;
    if (!(srv.tmpl.plain = srv.tmpl.tools = chat_template_parse(chatml, "chatml", &err))) abort();
    if (!(srv.responses = response_store_new(o.responses_store_bytes, &err))) abort();
    srv.tool_parser = TOOL_PARSER_HERMES;
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
    request *r = NULL;
    switch (data[0] % 11) {
    case 0:
    case 1: r = api_parse_generate(srv, data[0] % 11 ? REQ_CHAT : REQ_COMPLETION, body, len, &e); break;
    case 2: out = api_tokenize(srv, body, len, &e); break;
    case 3: out = api_detokenize(srv, body, len, &e); break;
    case 4: r = api_parse_messages(srv, body, len, &e); break;
    case 5: out = api_count_tokens(srv, body, len, &e); break;
    case 8: r = api_parse_embeddings(srv, body, len, &e); break;
    case 9: r = api_parse_score(srv, body, len, &e); break;
    case 10: r = api_parse_rerank(srv, body, len, &e); break;
    default: r = api_parse_responses(srv, body, len, &e); break;
    }
    free(out);
    if (!r) return 0;
    for (int i = 0; i < 4 && i < r->n_prompt; i++) { /* its own prompt as output */
        req_token t = {.id = r->prompt[i], .n_top = r->top_logprobs};
        for (int k = 0; k < t.n_top; k++) t.top_id[k] = r->prompt[(i + k) % r->n_prompt];
        request_add_token(r, &t);
    }
    request_end_text(r);
    r->finish = FINISH_LENGTH;
    const api_shape *sh = api_shape_of(r->api);
    free(sh->whole(srv, r));
    sse_buf buf = {0};
    shape_stream ss = {.buf = &buf, .srv = srv, .r = r};
    if (r->n_choices == 1 && sh->text) { /* embeddings are never streamed */
        sh->text(&ss, 0, r->text_len / 2);
        sh->text(&ss, r->text_len / 2, r->text_len);
        sh->call(&ss, "f", "{}");
        sh->end(&ss);
    }
    free(ss.text);
    free(buf.out);
    request_unref(r);
    return 0;
}
