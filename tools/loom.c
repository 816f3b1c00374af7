/* loom: the command line. `loom run` generates text (the embedded default model when no -m is
 * given); `loom bench latency` measures like vLLM's benchmark; `loom plan` prints the plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util/alloc.h"
#include "util/err.h"

static void usage(FILE *f) {
    fputs("usage: loom <command> [options]\n"
          "commands:\n"
          "  run            generate text (default: the embedded stories260K model, greedy, 200 tokens)\n"
          "  bench latency  prefill/decode latency with vLLM's flags and report\n"
          "  bench machine  sgemm rate and memory bandwidth of this machine\n"
          "  bench image    a vision-language model's encoding time for one picture\n"
          "  plan           print the module tree and the execution plan (regions and verdicts with -sp)\n"
          "  verify         run tp=1, TP and TP+SP on the same prompts and compare them (needs -tp N)\n"
          "  serve          OpenAI-compatible HTTP server with continuous batching (see serve options)\n"
          "common options:\n"
          "  -m, --model PATH          Hugging Face folder (or config.json with --load-format dummy)\n"
          "  --load-format auto|safetensors|dummy  dummy: real shapes, seeded random weights\n"
          "  --task auto|generate|embed|score  what the model runs for, as vLLM's --task: text (generate),\n"
          "                            an embedding (embed: its last hidden state pooled, as\n"
          "                            sentence-transformers' files say), or a reranker's yes/no score\n"
          "                            (score). auto: embed for a bare decoder (Qwen3Model) or a folder\n"
          "                            with modules.json, else generate\n"
          "  --dtype auto|float32|bfloat16  compute precision, as vLLM's. auto: bf16 weights on bf16\n"
          "                            activations (where the CPU has bf16 dot products), quantized\n"
          "                            ones on int8; float32: every linear exact in fp32\n"
          "  -q, --quantization none|int8|int4|fp8|mxfp4  quantize float linears at load (int8\n"
          "                            and fp8 E4M3: per channel; int4: groups of 128; mxfp4:\n"
          "                            E2M1 in blocks of 32); LM head and embeddings stay float\n"
          "  --fp8-activations         FP8 linears on FP8 activations (vLLM's W8A8, the checkpoint's\n"
          "                            static or dynamic scales); else exact fp32 activations\n"
          "  --quant-group-size N      columns per scale for --quantization (a multiple of 32)\n"
          "  --quantize-lm-head        with --quantization: the LM head and embedding table too,\n"
          "                            int8 per channel\n"
          "  --seed N                  dummy weights and sampling seed\n"
          "  -t, --threads N           threads per rank (default: the cores placed for the rank)\n"
          "  -tp, --tensor-parallel-size N   ranks to shard the model across (default 1)\n"
          "  --backend shm|mpi         shm: fork ranks on this machine; mpi: under mpirun\n"
          "  --comm-timeout S          a collective waiting longer fails the job (default 60)\n"
          "  --comm-spin N             busy-wait iterations before a waiting rank sleeps\n"
          "  --cpu-bind auto|none|LIST  where ranks run: auto splits this process's cores among\n"
          "                            the ranks on this machine by NUMA node and binds each rank's\n"
          "                            threads and memory there (under mpirun: keeps mpirun's\n"
          "                            binding); LIST|LIST gives each rank its CPUs (\"0-7|8-15\")\n"
          "  --enable-sequence-parallel  shard the residual stream by tokens across the ranks (-tp >= 2)\n"
          "  --enable-async-tp         fuse region collectives with their GEMMs (implies sequence parallel)\n"
          "  --sp-min-tokens N         passes of fewer tokens run as plain TP (default 1024; 0: never)\n"
          "  --enable-expert-parallel  each rank holds whole experts (E/tp, contiguous) and tokens travel\n"
          "                            to them in an all-to-all; attention stays tensor-parallel\n"
          "  -pp, --pipeline-parallel-size N  pipeline stages, each a range of decoder layers on its own\n"
          "                            -tp ranks\n"
          "  -dp, --data-parallel-size N  replicas of the model, each with its own -pp x -tp ranks, KV cache\n"
          "                            and sequences; a mixture of experts spreads its experts over every\n"
          "                            replica (whole with --enable-expert-parallel, else each expert's\n"
          "                            features split over tp x dp ranks). The job has tp x dp x pp\n"
          "                            ranks, rank = (stage x dp + replica) x tp + tp rank. run generates on\n"
          "                            replica 0; verify and bench latency spread their sequences\n"
          "  --expert-load FILE        with --enable-expert-parallel: place each MoE layer's experts by the\n"
          "                            token counts in FILE, balancing the ranks' work (EPLB; the file comes\n"
          "                            from bench latency --save-expert-load FILE)\n"
          "  --num-redundant-experts N with --expert-load: N spare copies per MoE layer for the experts\n"
          "                            with the most load per copy, their tokens spread over the copies\n"
          "  --pp-layer-partition L    decoder layers per stage, e.g. 3,2 (default: even, the remainder\n"
          "                            to the stages before the last)\n"
          "  --pp-microbatches N       most microbatches a pass of several sequences splits into\n"
          "                            (default: up to 4 per stage of 64+ tokens each; 1: none)\n"
          "  --max-model-len N         context length (default: what the KV budget holds, up to the model's)\n"
          "  --kv-cache-memory-bytes N KV cache budget on each rank, e.g. 8G (default 4G)\n"
          "  --block-size N            positions per KV cache block, a power of two 16..1024 (default 64)\n"
          "  --kv-cache-dtype T        how the KV cache stores K and V: auto (float32), bfloat16, fp8\n"
          "                            (E4M3) or int8, the 8-bit ones with a scale per head and position\n"
          "  --[no-]enable-prefix-caching  reuse the KV of a prompt's longest cached prefix of whole\n"
          "                            blocks (serve; default on)\n"
          "  --state-snapshot-interval N  hybrid models' prefix caching: keep the recurrent state\n"
          "                            every N positions, a multiple of the block size (default 1 block)\n"
          "  --state-snapshots N       snapshot slots of that state on each rank (default 2 a sequence)\n"
          "run options:\n"
          "  -p, --prompt TEXT         prompt (default: just BOS)\n"
          "  --image FILE              a picture (JPEG, PNG, WebP) for a vision-language model, in the order of\n"
          "                            the prompt's placeholders (Gemma 3: <start_of_image>); repeatable\n"
          "  -n, --n-predict N         tokens to generate (default 200)\n"
          "  --temp T                  temperature (default 0: greedy)\n"
          "  --top-k K, --top-p P, --min-p P  sampling filters (default off)\n"
          "  --ignore-eos              do not stop at EOS\n"
          "  -v, --verbose             print the timing summary on stderr\n"
          "speculative decoding (run, bench latency, serve):\n"
          "  --speculative-config JSON vLLM's: {\"method\": \"ngram\", \"num_speculative_tokens\": 4,\n"
          "                            \"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5} or {\"method\":\n"
          "                            \"draft_model\", \"model\": DIR, \"num_speculative_tokens\": 4,\n"
          "                            \"draft_tensor_parallel_size\": 1}\n"
          "serve options:\n"
          "  --host ADDR, --port N     where to listen (default 127.0.0.1:8000; port 0: any free one)\n"
          "  --served-model-name NAME  the model's name in the API (default: the -m argument)\n"
          "  --tool-call-parser NAME   read tool calls out of chat outputs in this format: hermes,\n"
          "                            llama3_json, mistral, deepseek_v3, granite, pythonic (default:\n"
          "                            detected from the chat template's markers, and printed)\n"
          "  --enable-auto-tool-choice accepted as vLLM's; loom parses calls whenever it has a parser,\n"
          "                            and with this flag refuses to start without one\n"
          "  --chat-template FILE      Jinja chat template (default: the model's chat_template.jinja or\n"
          "                            tokenizer_config.json's)\n"
          "  --max-num-seqs N          sequences generating at once; their KV shares the block pool (default 64)\n"
          "  --max-num-batched-tokens N  tokens per engine step: decode tokens plus prompt chunks (default 512,\n"
          "                            or --sp-min-tokens + --max-num-seqs with sequence parallelism)\n"
          "  --max-queue N             requests waiting for a slot; more get 503 (default 256)\n"
          "  --max-body-bytes N        larger request bodies get 413 (default 1 MiB)\n"
          "  --data-parallel-routing load|prefix  with -dp: go by load alone, as vLLM (load, default), or\n"
          "                            prefer a replica holding a cached prefix of the prompt (prefix)\n"
          "  --header-timeout S        a client finishes its request headers within S seconds of\n"
          "                            connecting (or of its last answer), or is closed (default 10)\n"
          "  --max-connections-per-address N  idle connections (no request, or its headers\n"
          "                            unfinished) one IP address may hold; one more closes its\n"
          "                            oldest idle one (default 64); working ones are never refused\n"
          "  --no-ui                   no chat page at / (by default a browser there gets one)\n"
          "  --score-tokens NO,YES     --task score: the tokens (words, or ids) whose probabilities at\n"
          "                            a pair's last token make its score, P(yes) (default no,yes)\n"
          "  --score-template FILE     --task score: Jinja writing a pair's prompt from `query` and\n"
          "                            `document` (Qwen3-Reranker's: examples/templates/);\n"
          "                            default: the query's tokens then the document's, as vLLM\n"
          "  --responses-store-bytes N  memory for /v1/responses conversations kept for\n"
          "                            previous_response_id; past it the least recently used go (default\n"
          "                            64 MiB; 0: store none)\n",
          f);
}

#define RUN_MAX_IMAGES 8

typedef struct run_opts {
    cli_common c;
    const char *prompt;
    const char *images[RUN_MAX_IMAGES]; /* --image FILE, in the prompt's order */
    int n_images;
    int n_predict;
    loom_sampling sampling;
    bool ignore_eos, verbose;
} run_opts;

static bool print_piece(void *user, int32_t id, const char *piece, size_t len) {
    (void)user, (void)id;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* The prompt's ids: the tokenized -p text (with the tokenizer's BOS; its pictures'
 * placeholders expanded), or BOS alone. */
static int prompt_ids(loom_model *m, const run_opts *o, int32_t **ids, size_t *n, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(m, &info);
    if (o->n_images) {
        char *text = run_image_prompt(m, o->prompt ? o->prompt : "", o->n_images, err);
        int rc = text ? loom_tokenize(m, text, true, ids, n, err) : -1;
        free(text);
        return rc;
    }
    if (o->prompt) {
        if (loom_tokenize(m, o->prompt, true, ids, n, err)) return -1;
        if (*n) return 0;
        free(*ids);
    }
    if (info.bos_id < 0) {
        snprintf(err->msg, sizeof err->msg, "the model has no bos_token_id to start from; give a prompt with -p");
        return -1;
    }
    if (!(*ids = mem_alloc(sizeof **ids, "the prompt", err))) return -1;
    (*ids)[0] = info.bos_id;
    *n = 1;
    return 0;
}

typedef struct run_job {
    const run_opts *o;
    loom_model *m;
    loom_engine_options eo;
    int32_t *ids;
    size_t n;
    float *pixels; /* the --image pictures' pixel values, in order (NULL: none) */
} run_job;

/* The pictures' rows for the prompt's image tokens: each encoded on this rank (replicated). */
static float *encode_images(loom_engine *e, const run_job *j, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(j->m, &info);
    size_t rows = (size_t)info.image_tokens * info.hidden, px = (size_t)3 * info.image_size * info.image_size;
    float *all = mem_array((size_t)j->o->n_images, rows * sizeof(float), "the pictures' features", err);
    for (int i = 0; all && i < j->o->n_images; i++)
        if (loom_encode_image(e, j->pixels + i * px, all + i * rows, err)) {
            free(all);
            return NULL;
        }
    return all;
}

/* One rank's part of `loom run`; every rank generates the same tokens, rank 0 prints them. */
static int generate_text(loom_comm *comm, void *arg) {
    run_job *j = arg;
    const run_opts *o = j->o;
    loom_err err = {{0}};
    loom_engine *e = cli_rank_engine("run", comm, j->m, &j->eo);
    if (!e) return 1;
    bool plain;
    loom_speculator *sp = cli_rank_speculator("run", comm, e, &o->c, &j->eo, &plain);
    if (!sp && !plain) {
        loom_engine_free(e);
        return 1;
    }
    loom_engine_stats es;
    loom_engine_get_stats(e, &es);
    loom_gen_stats st = {0};
    int rc = 0;
    if (es.replica) { /* the sequence runs on replica 0; the others' experts serve it */
    } else if (j->pixels) {
        float *rows = sp ? NULL : encode_images(e, j, &err);
        if (sp) rc = loom_errf(&err, "--image does not go with --speculative-config");
        else
            rc = !rows || loom_generate_images(e, j->ids, (int)j->n, rows, o->n_predict, &o->sampling, print_piece,
                                               NULL, &st, &err);
        free(rows);
    } else {
        rc = loom_generate_speculative(e, sp, j->ids, (int)j->n, o->n_predict, &o->sampling, print_piece, NULL, &st,
                                       &err);
    }
    if (!rc) rc = loom_engine_wait_replicas(e, &err);
    if (!rc && !es.replica) {
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (!rc && o->verbose && loom_comm_rank(comm) == 0) {
        cli_print_cpu("run", stderr);
        fprintf(stderr, "loom: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)%s\n",
                st.prompt_tokens, st.prefill_s, st.prompt_tokens / (st.prefill_s > 0 ? st.prefill_s : 1e-9),
                st.generated, st.decode_s, st.generated / (st.decode_s > 0 ? st.decode_s : 1e-9),
                st.stopped_at_eos ? ", stopped at EOS" : "");
        if (sp)
            fprintf(stderr,
                    "loom: speculative: %d decode passes, %d tokens proposed, %d accepted (%.1f%%), %.2f tokens a "
                    "pass\n",
                    st.passes, st.drafted, st.accepted, st.drafted ? 100.0 * st.accepted / st.drafted : 0.0,
                    st.passes ? (double)(st.generated - 1) / st.passes : 0.0);
    }
    if (rc) cli_rank_error("run", comm, &err);
    loom_speculator_free(sp);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

static int run_ranks(loom_model *m, const run_opts *o) {
    run_job j = {.o = o, .m = m};
    loom_err err = {{0}};
    if ((o->n_images && !(j.pixels = run_image_pixels(m, o->images, o->n_images, &err))) ||
        prompt_ids(m, o, &j.ids, &j.n, &err)) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        free(j.pixels);
        return 1;
    }
    loom_model_info info;
    loom_model_get_info(m, &info);
    int need = (int)j.n + o->n_predict;
    j.eo = cli_engine_options(&o->c);
    j.eo.max_seqs = 1, j.eo.max_tokens = 512;
    if (!j.eo.max_ctx) j.eo.max_ctx = need < info.max_pos ? need : info.max_pos;
    int rc = cli_spec_engine_options(&o->c, m, &j.eo) ? 1 : cli_launch(&o->c, m, &j.eo, 0, generate_text, &j);
    free(j.ids);
    free(j.pixels);
    return rc;
}

static int cmd_run(int argc, char **argv) {
    run_opts o = {.c = CLI_COMMON_DEFAULTS, .n_predict = 200, .sampling = {.top_p = 1}};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&o.c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o.prompt = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--image")) {
            if (o.n_images == RUN_MAX_IMAGES) {
                fprintf(stderr, "loom run: at most %d --image files\n", RUN_MAX_IMAGES);
                return 2;
            }
            o.images[o.n_images++] = cli_value(argc, argv, &i);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens"))
            o.n_predict = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 24);
        else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature"))
            o.sampling.temperature = (float)cli_float(a, cli_value(argc, argv, &i));
        else if (!strcmp(a, "--top-k")) o.sampling.top_k = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) o.sampling.top_p = (float)cli_float(a, cli_value(argc, argv, &i));
        else if (!strcmp(a, "--min-p")) o.sampling.min_p = (float)cli_float(a, cli_value(argc, argv, &i));
        else if (!strcmp(a, "--ignore-eos")) o.ignore_eos = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o.verbose = true;
        else {
            fprintf(stderr, "loom run: unknown option '%s' (see loom --help)\n", a);
            return 2;
        }
    }
    o.sampling.seed = o.c.seed;
    o.sampling.ignore_eos = o.ignore_eos;
    loom_model *m = cli_load_model(&o.c, true);
    if (!m) return 1;
    loom_model_info info;
    loom_model_get_info(m, &info);
    if (info.task == LOOM_TASK_EMBED) {
        fprintf(stderr, "loom run: %s is an embedding model: serve it (loom serve, POST /v1/embeddings)\n",
                info.source);
        cli_free(&o.c, m);
        return 2;
    }
    int rc = cli_load_speculation(&o.c) ? 1 : run_ranks(m, &o);
    cli_free(&o.c, m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return cmd_run(0, argv + 1);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cli_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "verify")) return cli_verify(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 2, argv + 2);
    if (cmd[0] == '-') return cmd_run(argc - 1, argv + 1);
    fprintf(stderr, "loom: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
