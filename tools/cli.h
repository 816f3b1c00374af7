/* Shared pieces of the loom command line: common options and their parsing. */
#ifndef LOOM_TOOLS_CLI_H
#define LOOM_TOOLS_CLI_H
#include "loom.h"

typedef struct cli_common {
    const char *model;             /* -m */
    bool dummy;                    /* --load-format dummy */
    const char *dtype;             /* --dtype */
    const char *quantization;      /* --quantization */
    int quant_group;               /* --quant-group-size */
    bool quantize_lm_head;         /* --quantize-lm-head */
    bool fp8_activations;          /* --fp8-activations */
    uint64_t seed;                 /* --seed */
    loom_task task;                /* --task (0: from the model's config) */
    int threads;                   /* --threads */
    int tp;                        /* -tp (0: as many as mpirun started) */
    int max_model_len;             /* --max-model-len */
    size_t kv_cache_bytes;         /* --kv-cache-memory-bytes (0: the engine's default) */
    int block_size;                /* --block-size (0: the engine's default) */
    loom_kv_dtype kv_cache_dtype;  /* --kv-cache-dtype */
    bool no_prefix_caching;        /* --no-enable-prefix-caching */
    int state_snapshot_interval;   /* --state-snapshot-interval (0: the engine's default) */
    int state_snapshots;           /* --state-snapshots (0: the engine's default) */
    const char *backend;           /* --backend shm|mpi */
    double comm_timeout;           /* --comm-timeout seconds */
    int comm_spin;                 /* --comm-spin iterations (-1: default) */
    const char *cpu_bind;          /* --cpu-bind auto|none|LIST|LIST (NULL: auto) */
    bool sp;                       /* --enable-sequence-parallel */
    bool async_tp;                 /* --enable-async-tp (implies sp) */
    bool mm_encoder_data;          /* --mm-encoder-tp-mode data: the vision tower whole on every rank */
    bool ep;                       /* --enable-expert-parallel */
    int sp_min_tokens;             /* --sp-min-tokens: shorter passes run as plain TP */
    int pp;                        /* -pp, --pipeline-parallel-size */
    int dp;                        /* -dp, --data-parallel-size */
    const char *pp_partition;      /* --pp-layer-partition "3,2" */
    int pp_microbatches;           /* --pp-microbatches (0: the engine's default) */
    bool isolate;                  /* run even a single rank in its own process */
    const char *spec_json;         /* --speculative-config */
    loom_spec_options spec;        /* parsed from it by cli_load_speculation */
    loom_model *draft;             /* and the draft model it names, loaded there */
    const char *expert_load_path;  /* --expert-load FILE: place experts by this profile */
    int redundant_experts;         /* --num-redundant-experts N: spare copies of hot experts */
    loom_expert_load *expert_load; /* read by cli_load_model */
} cli_common;

/* Below this many tokens a pass runs as plain TP: on one machine SP and async TP only pay on
 * long prefills (benches/RESULTS.md, issue 5), and decode steps are a few tokens. */
#define SP_MIN_TOKENS_DEFAULT 1024
#define CLI_COMMON_DEFAULTS                                                                                            \
    { .tp = 1, .pp = 1, .dp = 1, .backend = "shm", .comm_spin = -1, .sp_min_tokens = SP_MIN_TOKENS_DEFAULT }

/* If argv[*i] is a common option, consumes it (and its value) and returns 1; 0 if not one of
 * them; -1 after printing an error. */
int cli_common_arg(cli_common *c, int argc, char **argv, int *i);
/* Parses an integer option value; exits with a message naming the option on bad input. */
long cli_int(const char *opt, const char *val, long min, long max);
double cli_float(const char *opt, const char *val);
/* A byte count as vLLM writes them: digits with an optional suffix, k/m/g/t decimal (1k =
 * 1000), K/M/G/T binary (1K = 1024); exits with a message naming the option on bad input. */
size_t cli_bytes(const char *opt, const char *val);
/* Value of option argv[*i], advancing *i; exits if missing. */
const char *cli_value(int argc, char **argv, int *i);

/* The engine options the common flags set (threads, parallelism, KV budget, context). */
loom_engine_options cli_engine_options(const cli_common *c);
/* Loads -m (or the embedded model); settles flags that depend on each other first. */
loom_model *cli_load_model(cli_common *c, bool tokenizer);
/* --speculative-config: parses it and loads the draft model it names (with -m's --dtype), once,
 * before the ranks start; 0 with nothing asked, -1 after printing an error. */
int cli_load_speculation(cli_common *c);
/* Frees m and what the options loaded beside it (the draft model, the expert load profile). */
void cli_free(cli_common *c, loom_model *m);
/* What speculation needs of the target engine (eo's max_seqs set; loom_spec_engine_options);
 * -1 after printing why the draft does not fit. */
int cli_spec_engine_options(const cli_common *c, const loom_model *target, loom_engine_options *eo);
/* This rank's speculator for engine e (NULL, printed as "loom CMD: ...", on failure); *none
 * is set when no speculation was asked. */
loom_speculator *cli_rank_speculator(const char *cmd, loom_comm *comm, loom_engine *e, const cli_common *c,
                                     const loom_engine_options *eo, bool *none);
/* Checks that the model shards across the ranks asked for, starts them and runs fn in each
 * (fn fills eo->comm from its argument before building an engine); the shm slots hold at
 * least min_slot_bytes (what the command itself sends). Returns the exit status. */
int cli_launch(const cli_common *c, const loom_model *m, const loom_engine_options *eo, size_t min_slot_bytes,
               loom_rank_fn fn, void *arg);
/* This rank's engine from the job's options (eo with comm filled in); prints the error as
 * "loom CMD: ..." and returns NULL on failure. */
loom_engine *cli_rank_engine(const char *cmd, loom_comm *comm, loom_model *m, const loom_engine_options *eo);
/* Prints err for this rank: "loom CMD: msg" (with the rank when there are several). */
void cli_rank_error(const char *cmd, const loom_comm *comm, const loom_err *err);
/* The monotonic clock in seconds, and qsort's order of doubles: the benchmarks' timings. */
double cli_now(void);
int cli_by_double(const void *a, const void *b);
/* Prints "CPU: <model>, kernels <variant> (runs: ...)" to f; 1 if LOOM_CPU is unusable (printed
 * as "loom CMD: ..."). */
int cli_print_cpu(const char *cmd, FILE *f);
/* `loom run --image` (run_images.c): the pictures' pixel values [n][3][size][size] by the model's
 * processor (malloc'd), and the prompt with each picture's placeholder expanded as the model's
 * processor does (malloc'd); NULL with err naming the file or the placeholder count. */
float *run_image_pixels(const loom_model *m, const char *const *files, int n, loom_err *err);
char *run_image_prompt(const loom_model *m, const char *prompt, int n_images, loom_err *err);
/* `loom bench grammar` (bench_grammar.c), `loom bench image` (bench_image.c). */
int bench_grammar(int argc, char **argv);
int bench_image(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_verify(int argc, char **argv);
int cli_serve(int argc, char **argv);

#endif
