/* `loom serve` on one rank: rank 0 sets up the server (chat template, a scheduler per
 * data-parallel replica, HTTP) and runs the schedulers on this thread until SIGTERM or SIGINT,
 * then drains; the other ranks follow its rounds of steps (steps.c). */
#include "serve/serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"
#include "serve/replicas.h"
#include "serve/response_store.h"
#include "serve/scheduler.h"
#include "serve/steps.h"
#include "serve/structured.h"
#include "serve/tool_calls.h"
#include "template/template.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/file.h"

static volatile int stop_signal;
static void on_stop_signal(int sig) {
    (void)sig;
    stop_signal = 1;
}

/* Output rows a step reads at most: k + 1 a sequence that verifies k proposals, or every token
 * of the step when mean pooling reads them all. */
static int max_rows(const serve_options *o) {
    return o->pool_every_token ? o->max_num_batched_tokens : o->max_num_seqs * (o->num_speculative_tokens + 1);
}

loom_engine_options serve_engine_options(const loom_engine_options *eo, const serve_options *o) {
    loom_engine_options e = *eo;
    e.max_seqs = o->max_num_seqs;
    e.max_tokens = o->max_num_batched_tokens;
    e.all_logits = false;
    e.max_logits = max_rows(o);
    return e;
}

/* Every replica's step of a round: the engine's sizes, as serve_engine_options made them. */
static int round_init(step_round *r, const loom_engine *e, const serve_options *o, size_t vocab, bool rank0,
                      loom_err *err) {
    loom_engine_stats st;
    loom_kv_stats kv;
    loom_engine_get_stats(e, &st);
    loom_engine_get_kv_stats(e, &kv);
    return step_round_init(r, &st, kv.block_size, o->max_num_batched_tokens, o->max_num_seqs, max_rows(o), vocab, rank0,
                           err);
}

/* --task score's two tokens from --score-tokens NO,YES (default "no,yes"): each a token id, or a
 * word the tokenizer makes one token of; printed. */
static int choose_score_tokens(server *srv, const serve_options *o, loom_err *err) {
    if (srv->info.task != LOOM_TASK_SCORE)
        return o->score_tokens || o->score_template ? loom_errf(err, "%s applies to a reranker (--task score)",
                                                                o->score_tokens ? "--score-tokens" : "--score-template")
                                                    : 0;
    const char *spec = o->score_tokens ? o->score_tokens : "no,yes";
    const char *comma = strchr(spec, ',');
    if (!comma || strchr(comma + 1, ',')) return loom_errf(err, "--score-tokens '%s': give two tokens, NO,YES", spec);
    for (int k = 0; k < 2; k++) {
        char word[128];
        snprintf(word, sizeof word, "%.*s", k ? (int)strlen(comma + 1) : (int)(comma - spec), k ? comma + 1 : spec);
        char *end;
        long id = strtol(word, &end, 10);
        if (word[0] && !*end) {
            if (id < 0 || id >= srv->info.vocab)
                return loom_errf(err, "--score-tokens: %ld is not a token id in [0, %d)", id, srv->info.vocab);
            srv->score_ids[k] = (int32_t)id;
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        if (!srv->info.has_tokenizer || loom_tokenize(srv->m, word, false, &ids, &n, err) || n != 1) {
            free(ids);
            return loom_errf(err, "--score-tokens: '%s' is not one token of the model's vocabulary%s", word,
                             srv->info.has_tokenizer ? "" : " (it has no tokenizer: give token ids)");
        }
        srv->score_ids[k] = ids[0];
        free(ids);
    }
    fprintf(stderr, "loom serve: a pair's score is P(token %d) against token %d at its last token (--score-tokens)\n",
            srv->score_ids[1], srv->score_ids[0]);
    if (!o->score_template) return 0;
    size_t len;
    char *src = file_read_all(o->score_template, &len, err);
    if (!src) return loom_err_prefix(err, "--score-template");
    srv->score_tmpl = chat_template_parse(src, o->score_template, err);
    free(src);
    return srv->score_tmpl ? 0 : loom_err_prefix(err, "--score-template %s", o->score_template);
}

/* The tool-call parser, printed: --tool-call-parser's, else the one the markers in the tools
 * template name (as llama.cpp detects it), else none (outputs stay content). With
 * --enable-auto-tool-choice, vLLM's flag, there must be one. */
static int choose_tool_parser(server *srv, const serve_options *o, loom_err *err) {
    if (o->tool_call_parser) {
        srv->tool_parser = tool_parser_find(o->tool_call_parser);
        fprintf(stderr, "loom serve: tool calls read in the %s format (--tool-call-parser)\n",
                tool_parser_name(srv->tool_parser));
        return 0;
    }
    if (!srv->tmpl.tools) {
        if (o->enable_auto_tool_choice)
            return loom_errf(err, "--enable-auto-tool-choice needs --tool-call-parser, or a chat template to detect "
                                  "the format from");
        return 0;
    }
    srv->tool_parser = tool_parser_detect(srv->tmpl.tools_source);
    if (srv->tool_parser) {
        fprintf(stderr, "loom serve: tool calls read in the %s format (detected from the chat template)\n",
                tool_parser_name(srv->tool_parser));
        return 0;
    }
    if (o->enable_auto_tool_choice)
        return loom_errf(err,
                         "--enable-auto-tool-choice needs --tool-call-parser: the chat template shows no known "
                         "tool-call format (%s)",
                         tool_parser_names());
    fprintf(stderr, "loom serve: no tool-call format detected in the chat template: outputs stay content "
                    "(--tool-call-parser NAME picks one)\n");
    return 0;
}

/* A special token's text from the model's tokenizer, where tokenizer_config.json gave none: the
 * embedded model and --chat-template have no config, yet templates start with {{ bos_token }}.
 * Left NULL when the model has no such token or no tokenizer (dummy weights from a config). */
static void model_token(loom_model *m, int id, char **slot) {
    if (*slot || id < 0) return;
    int32_t one = id;
    loom_err ignored;
    *slot = loom_detokenize(m, &one, 1, false, &ignored);
}

static int serve_rank0(loom_comm *comm, loom_model *m, loom_engine *e, const serve_options *o) {
    loom_err err = {{0}};
    loom_engine_stats st;
    loom_engine_get_stats(e, &st);
    server srv = {.o = o, .m = m, .max_ctx = st.max_ctx, .dp = st.replicas};
    loom_model_get_info(m, &srv.info);
    pthread_mutex_init(&srv.lock, NULL);
    pthread_cond_init(&srv.work, NULL);
    metrics_init(&srv.met, o->max_num_seqs * st.replicas);
    srv.met.dp = st.replicas;
    int rc = 1;
    http_front *h = NULL;
    step_round round = {0};
    /* --chat-template, else the model's own; a model without one still serves completions, a
     * template that cannot be rendered stops start-up */
    if (chat_templates_load(o->model_dir, o->chat_template, srv.info.chat_template, srv.info.chat_template_tools,
                            &srv.tmpl, &err)) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        goto done;
    }
    model_token(m, srv.info.bos_id, &srv.tmpl.bos_token);
    model_token(m, srv.info.n_eos ? srv.info.eos_ids[0] : -1, &srv.tmpl.eos_token);
    if (structured_init(&srv, &err) || choose_tool_parser(&srv, o, &err) || choose_score_tokens(&srv, o, &err) ||
        !(srv.responses = response_store_new(o->responses_store_bytes, &err))) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        goto done;
    }
    bool ok = !round_init(&round, e, o, (size_t)srv.info.out_width, true, &err) &&
              (srv.sch = mem_zalloc((size_t)srv.dp, sizeof *srv.sch, "the schedulers", NULL));
    for (int d = 0; ok && d < srv.dp; d++) ok = (srv.sch[d] = sched_new(&srv, e, &round.of[d], d, &err)) != NULL;
    if (!ok || !(h = http_start(&srv, &err))) {
        fprintf(stderr, "loom serve: %s\n", err.msg[0] ? err.msg : "out of memory for the schedulers");
        goto done;
    }
    loom_kv_stats kv;
    loom_engine_get_kv_stats(e, &kv);
    fprintf(stderr,
            "loom serve: model %s as '%s', %d rank%s%s, %d sequences of up to %d tokens%s, KV cache %.1f MiB a rank "
            "(%s, %d blocks of %d positions, prefix caching %s), %d tokens a step%s%s\n",
            srv.info.source, o->served_name, loom_comm_size(comm), loom_comm_size(comm) > 1 ? "s" : "",
            srv.dp > 1 ? " in data-parallel replicas" : "", o->max_num_seqs, st.max_ctx, srv.dp > 1 ? " a replica" : "",
            st.kv_bytes / 1048576.0, loom_kv_dtype_name(kv.dtype), kv.blocks, kv.block_size,
            kv.prefix_caching ? "on" : "off", o->max_num_batched_tokens,
            srv.tmpl.plain ? ", chat template loaded" : ", no chat template",
            o->speculator ? ", speculative decoding on" : "");
    if (st.state_bytes)
        fprintf(stderr,
                "loom serve: recurrent layers' state %.1f MiB a rank (%zu bytes a sequence, for %d sequences), "
                "taken from the KV cache budget\n",
                st.state_bytes / 1048576.0, st.state_bytes_per_seq, o->max_num_seqs);
    if (kv.uncached) fprintf(stderr, "loom serve: prefix caching is off: %s\n", kv.uncached);
    if (srv.tmpl.plain) {
        char caps[160];
        chat_template_caps_describe(srv.tmpl.tools_caps, caps, sizeof caps);
        fprintf(stderr, "loom serve: chat template for tools: %s\n", caps);
    }
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (srv.dp > 1)
        fprintf(stderr,
                "loom serve: %d replicas; a request goes to the least loaded%s, or to the one its "
                "X-data-parallel-rank header names\n",
                srv.dp, o->prefix_routing ? " or one holding a cached prefix of its prompt" : "");
    rc = replicas_loop(&srv, e, comm, &round, &stop_signal, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "loom serve: %s; every open request failed with it\n", err.msg);
    else {
        /* every copy of a replica's KV bookkeeping took the same decisions: test_serve compares */
        fprintf(stderr, "loom serve: rank 0, replica 0: KV bookkeeping %016llx\n", loom_engine_kv_digest(e));
        for (int d = 0; d < srv.dp; d++)
            fprintf(stderr, "loom serve: rank 0's mirror, replica %d: KV bookkeeping %016llx\n", d,
                    sched_kv_digest(srv.sch[d]));
        fprintf(stderr, "loom serve: drained, stopping\n");
    }
done:
    http_stop(h); /* after the schedulers: open streams have ended (finished or failed) */
    for (int d = 0; srv.sch && d < srv.dp; d++) sched_free(srv.sch[d]);
    free(srv.sch);
    step_round_free(&round);
    chat_templates_free(&srv.tmpl);
    structured_free(&srv);
    response_store_free(srv.responses);
    chat_template_free(srv.score_tmpl);
    pthread_cond_destroy(&srv.work);
    pthread_mutex_destroy(&srv.lock);
    return rc;
}

int serve_run(loom_comm *comm, loom_model *m, loom_engine *e, const serve_options *o) {
    if (loom_comm_rank(comm) == 0) return serve_rank0(comm, m, e, o);
    /* rank 0 drains on SIGTERM/SIGINT (Ctrl-C reaches every rank) and then stops the others */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    step_round r;
    loom_err err = {{0}};
    loom_engine_stats st;
    loom_engine_get_stats(e, &st);
    loom_model_info info;
    loom_model_get_info(m, &info);
    if (round_init(&r, e, o, (size_t)info.out_width, false, &err)) {
        fprintf(stderr, "loom serve: rank %d: %s\n", loom_comm_rank(comm), err.msg);
        return 1;
    }
    int rc = step_round_follow(&r, e, comm, st.replica, &err);
    if (rc) fprintf(stderr, "loom serve: rank %d: %s\n", loom_comm_rank(comm), err.msg);
    else
        fprintf(stderr, "loom serve: rank %d, replica %d: KV bookkeeping %016llx\n", loom_comm_rank(comm), st.replica,
                loom_engine_kv_digest(e));
    step_round_free(&r);
    return rc ? 1 : 0;
}
