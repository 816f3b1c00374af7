/* A request's life and its output text: decoding tokens as they come and applying stop
 * strings, which may be split across tokens (see request.h). */
#include "serve/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

request *request_new(req_kind kind) {
    request *r = mem_zalloc(1, sizeof *r, "a request", NULL);
    if (!r) return NULL;
    r->kind = kind;
    r->max_tokens = -1;
    r->sampling.top_p = 1;
    r->repetition_penalty = 1;
    r->n_choices = r->n_return = 1;
    r->slot = -1;
    r->cached_tokens = -1;
    r->refs = 1;
    return r;
}

/* A copy of n elements of `size` bytes into *out (none: NULL); false when out of memory. */
static bool copy_array(void *out, const void *from, size_t n, size_t size, loom_err *err) {
    void *p = NULL;
    if (n && (p = mem_array(n, size, "a request's settings", err))) memcpy(p, from, n * size);
    *(void **)out = p;
    return !n || p;
}

static bool copy_string(char **out, const char *from, loom_err *err) {
    *out = from ? mem_strdup(from, "a request's settings", err) : NULL;
    return !from || *out;
}

request *request_clone(const request *r, loom_err *err) {
    request *c = mem_zalloc(1, sizeof *c, "a request", err);
    if (!c) return NULL;
    *c = (request){.kind = r->kind,
                   .api = r->api,
                   .serial = r->serial,
                   .created = r->created,
                   .n_prompt = r->n_prompt,
                   .max_tokens = r->max_tokens,
                   .sampling = r->sampling,
                   .stream = r->stream,
                   .include_usage = r->include_usage,
                   .logprobs = r->logprobs,
                   .top_logprobs = r->top_logprobs,
                   .n_allowed = r->n_allowed,
                   .presence_penalty = r->presence_penalty,
                   .frequency_penalty = r->frequency_penalty,
                   .repetition_penalty = r->repetition_penalty,
                   .n_bias = r->n_bias,
                   .min_tokens = r->min_tokens,
                   .n_stop_ids = r->n_stop_ids,
                   .n_choices = 1,
                   .n_return = 1,
                   .ranked = r->ranked,
                   .tool_parser = r->tool_parser,
                   .parallel_tool_calls = r->parallel_tool_calls,
                   .grammar = r->grammar ? grammar_ref(r->grammar) : NULL,
                   .slot = -1,
                   .cached_tokens = -1,
                   .refs = 1};
    memcpy(c->id, r->id, sizeof c->id);
    bool ok = copy_array(&c->prompt, r->prompt, (size_t)r->n_prompt, sizeof *r->prompt, err) &&
              copy_array(&c->allowed_ids, r->allowed_ids, (size_t)r->n_allowed, sizeof *r->allowed_ids, err) &&
              copy_array(&c->bias_id, r->bias_id, (size_t)r->n_bias, sizeof *r->bias_id, err) &&
              copy_array(&c->bias, r->bias, (size_t)r->n_bias, sizeof *r->bias, err) &&
              copy_array(&c->stop_ids, r->stop_ids, (size_t)r->n_stop_ids, sizeof *r->stop_ids, err) &&
              copy_string(&c->gbnf, r->gbnf, err) && copy_string(&c->echo, r->echo, err);
    for (int i = 0; ok && i < r->n_stop; i++) ok = copy_string(&c->stop[c->n_stop++], r->stop[i], err);
    if (ok) return c;
    request_unref(c);
    return NULL;
}

void request_unref(request *r) {
    if (!r || --r->refs > 0) return;
    for (int i = 1; i < r->n_choices && r->choices; i++) request_unref(r->choices[i]);
    free(r->choices);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->rendered);
    free(r->gbnf);
    free(r->allowed_ids);
    free(r->bias_id);
    free(r->bias);
    free(r->stop_ids);
    free(r->echo);
    free(r->conversation);
    free(r->pooled);
    free(r->echoed);
    free(r->tokens);
    free(r->context);
    free(r->text);
    loom_sampler_free(r->smp);
    loom_detokenizer_free(r->dec);
    grammar_matcher_free(r->gm);
    grammar_unref(r->grammar);
    free(r);
}

/* r cannot hold its output: it fails with why, and ends at the next step. */
static void out_of_memory(request *r, const loom_err *why) {
    snprintf(r->error, sizeof r->error, "%s", why->msg);
    if (r->finish == FINISH_NONE) r->finish = FINISH_CANCELLED;
}

/* false (r failed) when out of memory */
static bool append_text(request *r, const char *s, size_t n) {
    loom_err why;
    if (ARRAY_RESERVE(r->text, r->text_cap, r->text_len + n + 1, "a request's text", &why)) {
        out_of_memory(r, &why);
        return false;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return true;
}

/* After text grew from `from` bytes: cuts it at the earliest stop string that ends in the new
 * part (finishing r), or holds back the longest tail that a stop string may still complete. */
static void apply_stops(request *r, size_t from) {
    size_t ready = r->text_len, cut = (size_t)-1;
    const char *matched = NULL;
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        size_t start = from >= n - 1 ? from - (n - 1) : 0;
        const char *hit = memmem(r->text + start, r->text_len - start, r->stop[i], n);
        if (hit && (size_t)(hit - r->text) < cut) cut = (size_t)(hit - r->text), matched = r->stop[i];
        /* a tail of the text that is a proper prefix of this stop string */
        for (size_t k = n - 1 < r->text_len ? n - 1 : r->text_len; k > 0; k--)
            if (!memcmp(r->text + r->text_len - k, r->stop[i], k)) {
                if (r->text_len - k < ready) ready = r->text_len - k;
                break;
            }
    }
    if (cut != (size_t)-1) {
        r->text_len = ready = cut;
        r->text[cut] = 0;
        r->finish = FINISH_STOP;
        r->stop_cut = true;
        r->stop_matched = matched;
    }
    if (ready > r->text_ready) r->text_ready = ready;
}

void request_add_token(request *r, const req_token *t) {
    loom_err why;
    if (ARRAY_RESERVE(r->tokens, r->cap_tokens, (size_t)r->n_tokens + 1, "a request's tokens", &why) ||
        ARRAY_RESERVE(r->context, r->cap_context, (size_t)r->n_prompt + r->n_tokens + 1, "a request's tokens", &why)) {
        out_of_memory(r, &why);
        return;
    }
    if (!r->n_tokens) memcpy(r->context, r->prompt, (size_t)r->n_prompt * sizeof *r->context);
    r->context[r->n_prompt + r->n_tokens] = t->id;
    req_token *k = &r->tokens[r->n_tokens++];
    *k = *t;
    size_t from = r->text_len;
    if (r->dec && r->finish == FINISH_NONE) {
        size_t len;
        const char *piece = loom_detokenizer_next(r->dec, t->id, &len);
        if (append_text(r, piece, len) && r->n_tokens > r->min_tokens) apply_stops(r, from);
    }
    k->text_end = r->text_len;
}

void request_end_text(request *r) {
    if (r->dec && !r->stop_cut) { /* bytes held back (a byte-fallback run) before EOS or a grammar's end */
        size_t from = r->text_len, len;
        const char *piece = loom_detokenizer_flush(r->dec, &len);
        if (append_text(r, piece, len) && r->n_tokens > r->min_tokens) apply_stops(r, from);
        if (r->n_tokens) r->tokens[r->n_tokens - 1].text_end = r->text_len;
    }
    r->text_ready = r->text_len;
}

bool request_is_stop_token(const request *r, int32_t id) {
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id) return true;
    return false;
}

bool request_all_finished(const request *r) {
    for (int i = 0; i < r->n_choices; i++)
        if ((i ? r->choices[i] : r)->state != REQ_FINISHED) return false;
    return true;
}

const char *request_error(const request *r, int *status) {
    for (int i = 0; i < r->n_choices; i++) {
        const request *c = i ? r->choices[i] : r;
        if (!c->error[0]) continue;
        *status = c->error_status ? c->error_status : 500;
        return c->error;
    }
    return NULL;
}

void request_changed(request *r) {
    if (r->wake) r->wake(r->wake_ctx);
}

const char *request_finish_name(const request *r) {
    switch (r->finish) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_CANCELLED: return "abort";
    default: return NULL;
    }
}
