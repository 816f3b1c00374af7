/* Common option parsing and model loading for the loom commands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "loom: option %s needs a value\n", argv[*i]);
        exit(2);
    }
    return argv[++*i];
}

long cli_int(const char *opt, const char *val, long min, long max) {
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < min || v > max) {
        fprintf(stderr, "loom: %s: '%s' is not an integer in [%ld, %ld]\n", opt, val, min, max);
        exit(2);
    }
    return v;
}

double cli_float(const char *opt, const char *val) {
    char *end;
    double v = strtod(val, &end);
    if (end == val || *end) {
        fprintf(stderr, "loom: %s: '%s' is not a number\n", opt, val);
        exit(2);
    }
    return v;
}

size_t cli_bytes(const char *opt, const char *val) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    const char *units = "kmgt", *binary = "KMGT", *u;
    if (*end && end[1] == 0 && (u = strchr(units, *end))) v *= pow(1000, (double)(u - units + 1));
    else if (*end && end[1] == 0 && (u = strchr(binary, *end))) v *= pow(1024, (double)(u - binary + 1));
    else if (*end) v = -1;
    if (errno || end == val || !(v >= 1) || v > 1e18) {
        fprintf(stderr, "loom: %s: '%s' is not a size in bytes (e.g. 4G, 512M, 2000000000)\n", opt, val);
        exit(2);
    }
    return (size_t)v;
}

int cli_common_arg(cli_common *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) c->model = cli_value(argc, argv, i);
    else if (!strcmp(a, "--load-format")) {
        const char *v = cli_value(argc, argv, i);
        if (!strcmp(v, "dummy")) c->dummy = true;
        else if (!strcmp(v, "auto") || !strcmp(v, "safetensors")) c->dummy = false;
        else {
            fprintf(stderr, "loom: --load-format: unknown '%s' (auto, safetensors, dummy)\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--task")) {
        static const char *const tasks[] = {"auto", "generate", "embed", "score"};
        const char *v = cli_value(argc, argv, i);
        int t = 0;
        while (t < 4 && strcmp(v, tasks[t])) t++;
        if (t == 4) {
            fprintf(stderr, "loom: --task: unknown '%s' (auto, generate, embed, score)\n", v);
            return -1;
        }
        c->task = (loom_task)t;
    } else if (!strcmp(a, "--dtype")) c->dtype = cli_value(argc, argv, i);
    else if (!strcmp(a, "-q") || !strcmp(a, "--quantization")) c->quantization = cli_value(argc, argv, i);
    else if (!strcmp(a, "--quant-group-size")) c->quant_group = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 20);
    else if (!strcmp(a, "--quantize-lm-head")) c->quantize_lm_head = true;
    else if (!strcmp(a, "--fp8-activations")) c->fp8_activations = true;
    else if (!strcmp(a, "--seed")) c->seed = (uint64_t)cli_int(a, cli_value(argc, argv, i), 0, 1L << 62);
    else if (!strcmp(a, "--threads") || !strcmp(a, "-t"))
        c->threads = (int)cli_int(a, cli_value(argc, argv, i), 1, 1024);
    else if (!strcmp(a, "-tp") || !strcmp(a, "--tensor-parallel-size"))
        c->tp = (int)cli_int(a, cli_value(argc, argv, i), 1, 256);
    else if (!strcmp(a, "--max-model-len")) c->max_model_len = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 24);
    else if (!strcmp(a, "--kv-cache-memory-bytes")) c->kv_cache_bytes = cli_bytes(a, cli_value(argc, argv, i));
    else if (!strcmp(a, "--block-size")) c->block_size = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 20);
    else if (!strcmp(a, "--kv-cache-dtype")) {
        const char *v = cli_value(argc, argv, i);
        if (loom_kv_dtype_parse(v, &c->kv_cache_dtype)) {
            fprintf(stderr, "loom: --kv-cache-dtype: unknown '%s' (auto, float32, bfloat16, fp8, int8)\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--state-snapshot-interval"))
        c->state_snapshot_interval = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 24);
    else if (!strcmp(a, "--state-snapshots"))
        c->state_snapshots = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 20);
    else if (!strcmp(a, "--enable-prefix-caching")) c->no_prefix_caching = false;
    else if (!strcmp(a, "--no-enable-prefix-caching")) c->no_prefix_caching = true;
    else if (!strcmp(a, "--backend")) {
        c->backend = cli_value(argc, argv, i);
        if (!strcmp(c->backend, "mpi") && c->tp == 1) c->tp = 0; /* the job's size unless -tp says */
    } else if (!strcmp(a, "--comm-timeout")) c->comm_timeout = cli_float(a, cli_value(argc, argv, i));
    else if (!strcmp(a, "--comm-spin")) c->comm_spin = (int)cli_int(a, cli_value(argc, argv, i), 0, 1 << 30);
    else if (!strcmp(a, "--cpu-bind")) c->cpu_bind = cli_value(argc, argv, i);
    else if (!strcmp(a, "--enable-sequence-parallel") || !strcmp(a, "-sp")) c->sp = true;
    else if (!strcmp(a, "--enable-async-tp")) c->async_tp = c->sp = true;
    else if (!strcmp(a, "--mm-encoder-tp-mode")) {
        const char *v = cli_value(argc, argv, i);
        if (strcmp(v, "weights") && strcmp(v, "data")) {
            fprintf(stderr, "loom: --mm-encoder-tp-mode '%s': weights (sharded, the default) or data (replicated)\n",
                    v);
            return -1;
        }
        c->mm_encoder_data = !strcmp(v, "data");
    } else if (!strcmp(a, "--enable-expert-parallel") || !strcmp(a, "-ep")) c->ep = true;
    else if (!strcmp(a, "--sp-min-tokens")) c->sp_min_tokens = (int)cli_int(a, cli_value(argc, argv, i), 0, 1 << 24);
    else if (!strcmp(a, "-pp") || !strcmp(a, "--pipeline-parallel-size"))
        c->pp = (int)cli_int(a, cli_value(argc, argv, i), 1, 256);
    else if (!strcmp(a, "-dp") || !strcmp(a, "--data-parallel-size"))
        c->dp = (int)cli_int(a, cli_value(argc, argv, i), 1, 256);
    else if (!strcmp(a, "--pp-layer-partition")) c->pp_partition = cli_value(argc, argv, i);
    else if (!strcmp(a, "--pp-microbatches"))
        c->pp_microbatches = (int)cli_int(a, cli_value(argc, argv, i), 1, 1 << 16);
    else if (!strcmp(a, "--speculative-config")) c->spec_json = cli_value(argc, argv, i);
    else if (!strcmp(a, "--expert-load")) c->expert_load_path = cli_value(argc, argv, i);
    else if (!strcmp(a, "--num-redundant-experts"))
        c->redundant_experts = (int)cli_int(a, cli_value(argc, argv, i), 0, 1 << 16);
    else return 0;
    return 1;
}

int cli_spec_engine_options(const cli_common *c, const loom_model *target, loom_engine_options *eo) {
    loom_err err = {{0}};
    if (!c->spec_json || !loom_spec_engine_options(&c->spec, target, c->draft, eo, &err)) return 0;
    fprintf(stderr, "loom: --speculative-config: %s\n", err.msg);
    return -1;
}

int cli_load_speculation(cli_common *c) {
    loom_err err = {{0}};
    if (!c->spec_json) return 0;
    if (c->dp > 1) {
        fprintf(stderr, "loom: --speculative-config does not run with -dp %d yet (one replica only)\n", c->dp);
        return -1;
    }
    if (loom_spec_parse(c->spec_json, &c->spec, &err)) {
        fprintf(stderr, "loom: %s\n", err.msg);
        return -1;
    }
    if (c->spec.method == LOOM_SPEC_NGRAM) return 0;
    /* as the target: dummy weights with the target's seed make a config the target's own draft
     * (and an Eagle3 draft's dummy embedding the target's) */
    loom_model_options o = {.path = c->spec.model,
                            .dummy = c->dummy,
                            .seed = c->seed,
                            .dtype = c->dtype,
                            .progress = true,
                            .embedding_from = c->model};
    if (!(c->draft = loom_model_load(&o, &err))) {
        fprintf(stderr, "loom: --speculative-config: the draft model: %s\n", err.msg);
        return -1;
    }
    loom_model_info info;
    loom_model_get_info(c->draft, &info);
    if (!c->spec.num_speculative_tokens) c->spec.num_speculative_tokens = info.spec_tokens; /* as vLLM */
    if (c->spec.num_speculative_tokens < 1 || c->spec.num_speculative_tokens > LOOM_SPEC_MAX_TOKENS) {
        fprintf(stderr,
                "loom: --speculative-config: \"num_speculative_tokens\" is required (1 to %d): the draft's config "
                "%s\n",
                LOOM_SPEC_MAX_TOKENS, info.spec_tokens ? "proposes more" : "names none");
        return -1;
    }
    return 0;
}

void cli_free(cli_common *c, loom_model *m) {
    loom_model_free(c->draft);
    loom_expert_load_free(c->expert_load);
    c->draft = NULL, c->expert_load = NULL;
    loom_model_free(m);
}

loom_speculator *cli_rank_speculator(const char *cmd, loom_comm *comm, loom_engine *e, const cli_common *c,
                                     const loom_engine_options *eo, bool *none) {
    loom_err err = {{0}};
    *none = !c->spec_json;
    if (*none) return NULL;
    loom_engine_options o = *eo;
    o.comm = comm;
    loom_speculator *s = loom_speculator_new(e, c->draft, &c->spec, &o, &err);
    if (!s) cli_rank_error(cmd, comm, &err);
    return s;
}

loom_engine_options cli_engine_options(const cli_common *c) {
    return (loom_engine_options){.threads = c->threads,
                                 .sequence_parallel = c->sp,
                                 .async_tp = c->async_tp,
                                 .mm_encoder_data = c->mm_encoder_data,
                                 .expert_parallel = c->ep,
                                 .sp_min_tokens = c->sp_min_tokens,
                                 .kv_cache_bytes = c->kv_cache_bytes,
                                 .block_size = c->block_size,
                                 .kv_cache_dtype = c->kv_cache_dtype,
                                 .prefix_caching = !c->no_prefix_caching,
                                 .state_snapshot_interval = c->state_snapshot_interval,
                                 .state_snapshots = c->state_snapshots,
                                 .max_ctx = c->max_model_len,
                                 .pipeline_parallel = c->pp,
                                 .data_parallel = c->dp,
                                 .expert_load = c->expert_load,
                                 .redundant_experts = c->redundant_experts,
                                 .pp_layer_partition = c->pp_partition,
                                 .pp_microbatches = c->pp_microbatches};
}

loom_model *cli_load_model(cli_common *c, bool tokenizer) {
    loom_err err = {{0}};
    if (c->sp && c->tp == 1) {
        fprintf(stderr, "loom: warning: %s has no effect with one rank (-tp 1); ignored\n",
                c->async_tp ? "--enable-async-tp" : "--enable-sequence-parallel");
        c->sp = c->async_tp = false;
    }
    if (c->ep && c->tp == 1 && c->dp == 1) {
        fprintf(stderr, "loom: warning: --enable-expert-parallel has no effect with one rank (-tp 1); ignored\n");
        c->ep = false;
    }
    loom_model_options o = {.path = c->model,
                            .dummy = c->dummy,
                            .seed = c->seed,
                            .dtype = c->dtype,
                            .quantization = c->quantization,
                            .quant_group = c->quant_group,
                            .quantize_lm_head = c->quantize_lm_head,
                            .fp8_activations = c->fp8_activations,
                            .progress = true,
                            .load_tokenizer = tokenizer,
                            .task = c->task};
    loom_model *m = loom_model_load(&o, &err);
    if (!m) fprintf(stderr, "loom: %s\n", err.msg);
    if (m && c->expert_load_path && !(c->expert_load = loom_expert_load_read(c->expert_load_path, &err))) {
        fprintf(stderr, "loom: --expert-load: %s\n", err.msg);
        loom_model_free(m);
        return NULL;
    }
    if (m && c->expert_load && !c->ep)
        fprintf(stderr, "loom: warning: --expert-load places experts under --enable-expert-parallel only; ignored\n");
    return m;
}

int cli_launch(const cli_common *c, const loom_model *m, const loom_engine_options *eo, size_t min_slot_bytes,
               loom_rank_fn fn, void *arg) {
    loom_err err = {{0}};
    if ((c->tp > 1 || c->pp > 1 || c->dp > 1 || c->pp_partition) &&
        loom_check_sharding(m, c->tp > 0 ? c->tp : 1, eo, &err)) {
        fprintf(stderr, "loom: %s\n", err.msg);
        return 1;
    }
    size_t slot = loom_comm_slot_bytes(m, c->tp > 0 ? c->tp : 1, eo);
    loom_launch_options lo = {.tp = c->tp,
                              .pp = c->pp,
                              .dp = c->dp,
                              .backend = c->backend,
                              .timeout_s = c->comm_timeout,
                              .spin = c->comm_spin,
                              .isolate = c->isolate,
                              .cpu_bind = c->cpu_bind,
                              .mpi_progress = eo->async_tp || eo->pipeline_parallel > 1,
                              .slot_bytes = slot > min_slot_bytes ? slot : min_slot_bytes,
                              .forward_signals = min_slot_bytes > 0};
    int rc = loom_launch(&lo, fn, arg, &err);
    if (rc && err.msg[0]) fprintf(stderr, "loom: %s\n", err.msg);
    return rc;
}

void cli_rank_error(const char *cmd, const loom_comm *comm, const loom_err *err) {
    if (loom_comm_size(comm) > 1 && strncmp(err->msg, "rank ", 5))
        fprintf(stderr, "loom %s: rank %d: %s\n", cmd, loom_comm_rank(comm), err->msg);
    else fprintf(stderr, "loom %s: %s\n", cmd, err->msg);
}

loom_engine *cli_rank_engine(const char *cmd, loom_comm *comm, loom_model *m, const loom_engine_options *eo) {
    loom_err err = {{0}};
    loom_engine_options o = *eo;
    o.comm = comm;
    loom_engine *e = loom_engine_new(m, &o, &err);
    if (!e) cli_rank_error(cmd, comm, &err);
    return e;
}

int cli_print_cpu(const char *cmd, FILE *f) {
    loom_cpu_info ci;
    loom_err err = {{0}};
    if (loom_cpu_get_info(&ci, &err)) {
        fprintf(stderr, "loom %s: %s\n", cmd, err.msg);
        return 1;
    }
    fprintf(f, "CPU: %s, kernels %s (this CPU runs: %s); GEMMs: %s\n", ci.model, ci.variant, ci.runnable, ci.gemm);
    return 0;
}

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int cli_by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
