/* `loom serve`: the OpenAI-compatible server (src/serve/) with the engine flags `run` takes. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "serve/serve.h"
#include "serve/steps.h"
#include "serve/tool_calls.h"
#include "util/alloc.h"

typedef struct serve_job {
    loom_model *m;
    loom_engine_options eo;
    serve_options so;
    cli_common *c;
} serve_job;

/* Rank 0 proposes (a draft model runs there, whole); the other ranks only verify, in the steps
 * it sends them. */
static int serve_rank(loom_comm *comm, void *arg) {
    serve_job *j = arg;
    loom_engine *e = cli_rank_engine("serve", comm, j->m, &j->eo);
    if (!e) return 1;
    serve_options so = j->so;
    bool none = true;
    if (loom_comm_rank(comm) == 0 && j->c->spec_json &&
        !(so.speculator = cli_rank_speculator("serve", comm, e, j->c, &j->eo, &none))) {
        loom_engine_free(e);
        return 1;
    }
    int rc = serve_run(comm, j->m, e, &so);
    loom_speculator_free(so.speculator);
    loom_engine_free(e);
    return rc;
}

/* The folder a chat template would be found in: -m itself, or a config.json's folder (not a
 * GGUF file's: the file carries its own); NULL with err set when out of memory, or without when
 * there is none. */
static char *model_dir(const char *model, loom_err *err) {
    struct stat st;
    if (!model || stat(model, &st)) return NULL;
    if (S_ISDIR(st.st_mode)) return mem_strdup(model, "the model's folder", err);
    size_t n = strlen(model);
    if (n < 5 || strcmp(model + n - 5, ".json")) return NULL;
    char *copy = mem_strdup(model, "the model's path", err),
         *dir = copy ? mem_strdup(dirname(copy), "the model's folder", err) : NULL;
    free(copy);
    return dir;
}

/* Tokens per step unless --max-num-batched-tokens says: 512, as llama.cpp's micro-batch. A step
 * takes about as long as its tokens on a CPU (a 512-token step of the 1B shape, ~4 s on 2
 * cores), and every running stream waits for it: a chat workload of 16 users had half the
 * follow-up TTFT and ITL p99 at 512 as at 2048, at the same throughput (benches/RESULTS.md,
 * issue 23). At least every running sequence's token fits; with sequence parallelism, also a
 * prompt chunk long enough to run sequence-parallel (--sp-min-tokens) beside them. */
static int default_batched_tokens(const cli_common *c, int max_num_seqs) {
    int n = max_num_seqs > 512 ? max_num_seqs : 512;
    if (c->sp && c->sp_min_tokens + max_num_seqs > n) n = c->sp_min_tokens + max_num_seqs;
    return n;
}

int cli_serve(int argc, char **argv) {
    cli_common c = CLI_COMMON_DEFAULTS;
    serve_job j = {.so = {.host = "127.0.0.1",
                          .port = 8000,
                          .max_num_seqs = 64,
                          .max_num_batched_tokens = 0, /* derived below unless given */
                          .max_queue = 256,
                          .max_body_bytes = 1 << 20,
                          .header_timeout = 10,
                          .max_per_address = 64,
                          .responses_store_bytes = 64 << 20}};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(a, "--host")) j.so.host = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--port")) j.so.port = (int)cli_int(a, cli_value(argc, argv, &i), 0, 65535);
        else if (!strcmp(a, "--served-model-name")) j.so.served_name = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--chat-template")) j.so.chat_template = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--enable-auto-tool-choice")) j.so.enable_auto_tool_choice = true;
        else if (!strcmp(a, "--tool-call-parser")) {
            j.so.tool_call_parser = cli_value(argc, argv, &i);
            if (!tool_parser_find(j.so.tool_call_parser)) {
                fprintf(stderr, "loom serve: --tool-call-parser: unknown parser '%s' (known: %s)\n",
                        j.so.tool_call_parser, tool_parser_names());
                return 2;
            }
        } else if (!strcmp(a, "--max-num-seqs"))
            j.so.max_num_seqs = (int)cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "--max-num-batched-tokens"))
            j.so.max_num_batched_tokens = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--max-queue")) j.so.max_queue = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--header-timeout"))
            j.so.header_timeout = (double)cli_int(a, cli_value(argc, argv, &i), 1, 3600);
        else if (!strcmp(a, "--max-connections-per-address"))
            j.so.max_per_address = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--no-ui")) j.so.no_ui = true;
        else if (!strcmp(a, "--score-tokens")) j.so.score_tokens = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--score-template")) j.so.score_template = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--responses-store-bytes"))
            j.so.responses_store_bytes = (size_t)cli_int(a, cli_value(argc, argv, &i), 0, 1L << 40);
        else if (!strcmp(a, "--data-parallel-routing")) {
            const char *v = cli_value(argc, argv, &i);
            if (strcmp(v, "prefix") && strcmp(v, "load")) {
                fprintf(stderr, "loom serve: --data-parallel-routing: unknown '%s' (prefix, load)\n", v);
                return 2;
            }
            j.so.prefix_routing = !strcmp(v, "prefix");
        } else if (!strcmp(a, "--max-body-bytes"))
            j.so.max_body_bytes = (size_t)cli_int(a, cli_value(argc, argv, &i), 1024, 1L << 32);
        else {
            fprintf(stderr, "loom serve: unknown option '%s' (see loom --help)\n", a);
            return 2;
        }
    }
    if (!j.so.max_num_batched_tokens) j.so.max_num_batched_tokens = default_batched_tokens(&c, j.so.max_num_seqs);
    if (j.so.max_num_batched_tokens < j.so.max_num_seqs) {
        fprintf(stderr,
                "loom serve: --max-num-batched-tokens %d is below --max-num-seqs %d: a step must hold every "
                "running sequence's next token\n",
                j.so.max_num_batched_tokens, j.so.max_num_seqs);
        return 2;
    }
    j.so.seed = c.seed;
    if (!j.so.served_name) j.so.served_name = c.model ? c.model : "stories260K";
    loom_err err = {{0}};
    char *dir = model_dir(c.model, &err);
    if (!dir && err.msg[0]) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        return 1;
    }
    j.so.model_dir = dir;
    /* a folder without tokenizer.json still serves prompts given as token ids */
    char tok[4096];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir ? dir : "");
    bool text = !dir || !access(tok, R_OK);
    if (!text)
        fprintf(stderr, "loom serve: %s has no tokenizer.json: prompts must be token ids, and outputs are ids\n", dir);
    if (!(j.m = cli_load_model(&c, text))) {
        free(dir);
        return 1;
    }
    if (cli_load_speculation(&c)) {
        cli_free(&c, j.m);
        free(dir);
        return 1;
    }
    if (c.spec_json) {
        int *dtp = &c.spec.draft_tensor_parallel_size;
        if (c.spec.method == LOOM_SPEC_DRAFT_MODEL && *dtp > 1) {
            fprintf(stderr,
                    "loom serve: draft_tensor_parallel_size %d: the server runs the draft model whole on rank "
                    "0 (1)\n",
                    *dtp);
            cli_free(&c, j.m);
            free(dir);
            return 2;
        }
        *dtp = 1;
        j.so.num_speculative_tokens = c.spec.num_speculative_tokens;
    }
    j.c = &c;
    loom_model_info info;
    loom_model_get_info(j.m, &info);
    if (info.task != LOOM_TASK_GENERATE && c.spec_json) {
        fprintf(stderr, "loom serve: --speculative-config speeds up generation; this model runs for --task %s\n",
                info.task == LOOM_TASK_EMBED ? "embed" : "score");
        cli_free(&c, j.m);
        free(dir);
        return 2;
    }
    j.so.pool_every_token = info.task == LOOM_TASK_EMBED && info.pooling == LOOM_POOL_MEAN;
    loom_engine_options eo = cli_engine_options(&c);
    j.eo = serve_engine_options(&eo, &j.so);
    int rc = cli_spec_engine_options(&c, j.m, &j.eo)
                 ? 1
                 : cli_launch(&c, j.m, &j.eo, serve_step_bytes(&j.eo, info.max_pos), serve_rank, &j);
    cli_free(&c, j.m);
    free(dir);
    return rc;
}
