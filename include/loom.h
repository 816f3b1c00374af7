/* loom public C API: load a model, build an engine (plan, buffers, KV cache) for it, run
 * batched forward passes, generate text. Everything not declared here is internal. */
#ifndef LOOM_H
#define LOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The version of this header. CMakeLists.txt reads these three numbers for the project, the
 * shared library's SONAME and the installed packages, so they are the only place it is written. */
#define LOOM_VERSION_MAJOR    0
#define LOOM_VERSION_MINOR    1
#define LOOM_VERSION_PATCH    0
#define LOOM_VERSION_STR_(x)  #x
#define LOOM_VERSION_XSTR_(x) LOOM_VERSION_STR_(x)
#define LOOM_VERSION                                                                                                   \
    LOOM_VERSION_XSTR_(LOOM_VERSION_MAJOR)                                                                             \
    "." LOOM_VERSION_XSTR_(LOOM_VERSION_MINOR) "." LOOM_VERSION_XSTR_(LOOM_VERSION_PATCH)

/* Marks the library's interface: it is compiled with hidden visibility, so libloom.so and
 * libloom.a export these functions and nothing else. */
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_API               __attribute__((visibility("default")))
#define LOOM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define LOOM_API
#define LOOM_PRINTF(fmt, args)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library this program runs with (LOOM_VERSION as it was built), which can
 * differ from the header's when the shared library was replaced. */
LOOM_API const char *loom_version(void);

/* One line describing the first error; filled by every call that can fail. */
typedef struct loom_err {
    char msg[512];
} loom_err;

typedef struct loom_model loom_model;
typedef struct loom_engine loom_engine;
typedef struct loom_expert_load loom_expert_load; /* tokens routed to each expert (see below) */
typedef struct loom_comm loom_comm;               /* this rank's view of the other ranks */

/* What a model is run for, as vLLM's --task: next-token logits (generate; score reads two of
 * them, a causal reranker's yes/no), or an embedding (its final hidden state, pooled). AUTO:
 * embed for a bare decoder (config.json's architectures[0] "Qwen3Model") or a folder with
 * sentence-transformers' modules.json, else generate. */
typedef enum loom_task { LOOM_TASK_AUTO, LOOM_TASK_GENERATE, LOOM_TASK_EMBED, LOOM_TASK_SCORE } loom_task;
/* An embedding's pooling over a prompt's final hidden states (after the final norm). */
typedef enum loom_pooling { LOOM_POOL_LAST, LOOM_POOL_MEAN } loom_pooling;

typedef struct loom_model_options {
    const char *path; /* Hugging Face folder or a config.json (dummy); NULL: embedded default */
    bool dummy;       /* --load-format dummy: real shapes, seeded random weights */
    uint64_t seed;    /* dummy weights */
    /* --dtype, the compute precision as vLLM's (docs/USAGE.md, "Compute precision"): "auto" (weights as
     * stored, f16 widened to f32; bf16 ones on bf16 activations, quantized ones on int8),
     * "float32" (every linear exact in fp32, weights as stored), "bfloat16" (float weights
     * held in bf16, computed as auto) */
    const char *dtype;
    const char *quantization; /* quantize float linears at load: NULL/"none", "int8", "int4", "fp8", "mxfp4" */
    int quant_group;          /* columns per scale for it (0: per channel for int8 and fp8, 128 for int4) */
    bool quantize_lm_head;    /* the LM head and embedding table too (8 bits per channel); else float */
    /* FP8 linears (checkpoints, --quantization fp8) compute on FP8 activations as vLLM's W8A8
     * does, with the checkpoint's activation scales (static, or dynamic per token or group);
     * else on fp32 activations, exact in the weight */
    bool fp8_activations;
    bool progress;       /* print a progress line on stderr while loading */
    bool load_tokenizer; /* read tokenizer.json (needed for text in/out) */
    /* An Eagle3 draft without its own embed_tokens.weight reads model.embed_tokens.weight from
     * this folder (the target's), as vLLM shares the target's embedding */
    const char *embedding_from;
    loom_task task;
} loom_model_options;

LOOM_API loom_model *loom_model_load(const loom_model_options *o, loom_err *err);
LOOM_API void loom_model_free(loom_model *m);

typedef struct loom_model_info {
    const char *arch;
    int vocab, hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, max_pos;
    int bos_id;
    const int *eos_ids;
    int n_eos;
    size_t n_params;
    size_t weight_bytes; /* as held in memory */
    const char *source;  /* the folder or config it was loaded from, or "(embedded stories260K)" */
    bool has_tokenizer;  /* text in and out (loom_tokenize, loom_detokenize) */
    int spec_tokens;     /* an Eagle3 draft: the speculative tokens its config proposes (0: none) */
    loom_task task;      /* as resolved (never AUTO) */
    /* the width of a forward pass's output rows: vocab, or hidden for an embedding model, whose
     * rows are final hidden states (loom_forward's "logits"), pooled as these say */
    int out_width;
    loom_pooling pooling;
    bool normalize;
    const char *chat_template; /* the chat template the model file carries (a GGUF's), or NULL */
    /* its template for requests with tools (a GGUF's tokenizer.chat_template.tool_use), or NULL */
    const char *chat_template_tools;
    /* a hybrid model's recurrent layers (Gated DeltaNet, Mamba-2): how many, and the key and
     * value heads tensor parallelism splits them by (Mamba-2: its heads, both; 0 where it has
     * none), and Mamba-2's groups of B and C, by which its gated norm normalises (0: none) */
    int n_recurrent_layers, n_linear_k_heads, n_linear_v_heads, n_linear_groups;
    int n_attention_layers; /* the layers that attend (a hybrid model's others do not) */
    /* a vision-language model (0 tokens: a text model): the square side its pictures' pixel
     * values have, the tokens each picture takes in a prompt, and their placeholder id, which
     * the prompt holds image_tokens times between image_begin and image_end */
    int image_size, image_tokens, image_token, image_begin, image_end;
} loom_model_info;
LOOM_API void loom_model_get_info(const loom_model *m, loom_model_info *info);

#define LOOM_MAX_CAPTURE_LAYERS 3

/* The KV cache budget per rank unless asked: 4 GiB, as vLLM's CPU backend defaults to. */
#define LOOM_KV_CACHE_BYTES_DEFAULT ((size_t)4 << 30)
/* Positions per KV cache block unless asked (benches/RESULTS.md, "KV cache block size"). */
#define LOOM_BLOCK_SIZE_DEFAULT 64

/* How the KV cache stores K and V (--kv-cache-dtype). FLOAT32 (also "auto") keeps what the pass
 * computed. The others round each position's values as they are written, so every later read of
 * them, in any mode, sees the same rounded values:
 * - BF16: each value to bf16, nearest even;
 * - FP8: each head's values divided by max|x| / 448, to E4M3 (nearest even), times it on reading;
 * - INT8: each head's values divided by max|x| / 127, rounded to an integer (nearest even).
 * The 8-bit forms keep one fp32 scale for each head of each position (a latent cache: for each
 * group of gcd(kv_lora, rope) columns). */
typedef enum loom_kv_dtype { LOOM_KV_FLOAT32, LOOM_KV_BF16, LOOM_KV_FP8, LOOM_KV_INT8 } loom_kv_dtype;
/* The dtype `name` names (auto, float32, bfloat16/bf16, fp8/fp8_e4m3, int8) into *out; -1 if none. */
LOOM_API int loom_kv_dtype_parse(const char *name, loom_kv_dtype *out);
LOOM_API const char *loom_kv_dtype_name(loom_kv_dtype dt);

typedef struct loom_engine_options {
    int max_seqs;          /* sequences held at once (each a block table; the pool is shared) */
    int max_ctx;           /* positions per sequence (0: as many as the KV pool holds, up to
                           max_position_embeddings) */
    size_t kv_cache_bytes; /* KV cache budget on each rank (0: LOOM_KV_CACHE_BYTES_DEFAULT) */
    int block_size;        /* positions per KV cache block, a power of two from 16 to 1024
                               (0: LOOM_BLOCK_SIZE_DEFAULT) */
    bool prefix_caching;   /* key full blocks by their tokens, for loom_engine_match_prefix */
    /* a hybrid model's recurrent layers under prefix caching: a pass keeps a snapshot of a
     * sequence's state at the last multiple of state_snapshot_interval positions it reaches (a
     * multiple of block_size; 0: one block), in state_snapshots slots (0: two a sequence), and a
     * cached prefix resumes from the longest one kept */
    int state_snapshot_interval, state_snapshots;
    loom_kv_dtype kv_cache_dtype; /* how K and V are stored (0: float32) */
    int max_tokens;               /* tokens per forward pass */
    bool all_logits;              /* logits for every token, not only requested rows */
    int max_logits;               /* logit rows a pass returns at most (0: one a sequence, or every token
                               with all_logits); speculative decoding verifies k + 1 a sequence */
    int threads;                  /* 0: all cores / ranks */
    loom_comm *comm;              /* the ranks to shard across; NULL: this process alone (tp=1) */
    bool sequence_parallel;       /* shard the residual stream by tokens between decoder layers */
    bool async_tp;                /* fuse region collectives with their GEMMs (implies sequence_parallel) */
    int sp_min_tokens;            /* passes of fewer tokens run as plain TP (0: never) */
    /* a vision-language model's tower whole on every rank (vLLM's --mm-encoder-tp-mode data),
     * not sharded by heads and MLP features as the text model is */
    bool mm_encoder_data;
    /* Expert parallelism (vLLM's --enable-expert-parallel): the ranks of a stage hold whole
     * experts (E/tp each, contiguous; the first E % tp ranks one more), rows travel to them in
     * an all-to-all and back; attention and dense layers stay tensor-parallel. With data
     * parallelism the experts spread over the stage's ranks of every replica (dp x tp). */
    bool expert_parallel;
    /* Data parallelism (vLLM's --data-parallel-size): comm holds tp * dp * pp ranks (loom_launch's
     * order), and this engine runs its replica's sequences with its own KV cache. Dense models'
     * replicas are independent. With expert parallelism the replicas step together: each calls
     * loom_forward as often as the others, with an empty batch (n_tokens 0) where it has nothing
     * to run, and its experts still serve the other replicas' tokens. */
    int data_parallel; /* replicas (0 or 1: one) */
    /* Expert parallelism's placement by measured load (EPLB): each MoE layer's experts are
     * packed, heaviest first, onto the ranks with the least load so far, each rank keeping the
     * contiguous split's number of experts (NULL: contiguous ranges). Every rank must be given
     * the same profile. */
    const loom_expert_load *expert_load;
    /* and this many spare copies per MoE layer for its experts with the most load per copy
     * (DeepSeek's EPLB; needs expert_load and expert parallelism), an expert's tokens spread
     * over its copies */
    int redundant_experts;
    /* Pipeline parallelism: stage s runs a contiguous range of decoder layers, the first the
     * embedding, the last the LM head; with several replicas a pass flows as one microbatch. */
    int pipeline_parallel;          /* stages (0 or 1: one) */
    const char *pp_layer_partition; /* layers per stage, "3,2" as vLLM's VLLM_PP_LAYER_PARTITION
                                       (NULL: even, the remainder to the stages before the last) */
    int pp_microbatches;            /* most microbatches a pass of several sequences splits into
                                       (0: up to 4 per stage, each of LOOM_PP_MICROBATCH_MIN_TOKENS
                                       or more; 1: none) */
    /* Hidden states kept after each pass, which an Eagle3 draft reads (loom_spec_engine_options
     * sets them): every token's hidden state entering each of these decoder layers (all-gathered
     * under sequence parallelism, sent from the stage that runs the layer under pipeline
     * parallelism), and with capture_last the logit rows' hidden state entering the final norm. */
    int n_capture_layers;
    int capture_layers[LOOM_MAX_CAPTURE_LAYERS];
    bool capture_last;
} loom_engine_options;

/* The default split keeps microbatches at least this long: shorter ones (decode steps) would
 * read every weight of a stage once per microbatch, and a memory-bound pass costs its reads. */
#define LOOM_PP_MICROBATCH_MIN_TOKENS 64

LOOM_API loom_engine *loom_engine_new(loom_model *m, const loom_engine_options *o, loom_err *err);
LOOM_API void loom_engine_free(loom_engine *e);

/* One forward pass over a flattened batch: token i is ids[i] at position pos[i] of sequence
 * seq[i] (tokens of a sequence contiguous, in order; a sequence's positions continue from
 * what its KV cache holds). A batch of no tokens runs nothing (with replicas in lockstep, an
 * empty pass: see data_parallel). Logits are returned for rows logit_rows[0..n_logits) (indices into
 * the batch) as a [n_logits, vocab] array owned by the engine, valid until the next call. */
typedef struct loom_batch {
    int n_tokens;
    const int32_t *ids, *pos, *seq;
    int n_logits;
    const int32_t *logit_rows;
    /* A vision-language model: one row of the text model's width per image token of the batch,
     * in order (loom_encode_image's features); every token of an image must then be in the
     * same batch, since they attend to each other. NULL: image tokens are plain tokens (their
     * embedding rows), as transformers runs a prompt without pixel values. */
    const float *image_rows;
} loom_batch;
LOOM_API int loom_forward(loom_engine *e, const loom_batch *b, const float **logits, loom_err *err);
/* A vision-language model's features of one picture: pixels [3, image_size, image_size] as its
 * image processor makes them (loom_model_info), features [image_tokens, hidden], the rows a
 * batch's image tokens take (loom_batch.image_rows). Every rank runs the whole vision tower and
 * gets the same rows; each calls this, as loom_forward. */
LOOM_API int loom_encode_image(loom_engine *e, const float *pixels, float *features, loom_err *err);
/* Data parallelism with expert parallelism (loom_engine_options.data_parallel): this replica has
 * nothing more to run; its experts keep serving the other replicas' tokens, in empty passes,
 * until every replica has called this. Returns at once on an engine whose replicas do not step
 * together (one replica, or a model without expert-parallel layers). */
LOOM_API int loom_engine_wait_replicas(loom_engine *e, loom_err *err);

/* Custom ops: a user's own layer inserted into a model's module tree, analysed by the planner
 * like a built-in op from the class it declares (what sequence parallelism needs to know:
 * whether it commutes with a sum over ranks, whether it mixes tokens). */
typedef enum loom_op_class {
    LOOM_OP_ELEMENTWISE,  /* token-local and nonlinear (an activation): may not act on a partial sum */
    LOOM_OP_ADDITIVE,     /* a sum of its input(s), no constant term: keeps a partial sum partial */
    LOOM_OP_PASSTHROUGH,  /* moves values without arithmetic (view, copy, cast) */
    LOOM_OP_SCALING,      /* multiplies by a constant: keeps a partial sum partial */
    LOOM_OP_TOKEN_MIXING, /* reads other tokens' rows (convolution, scan, token shift) */
    LOOM_OP_OPAQUE,       /* nothing is known: the planner cannot verify what it does to a partial sum */
} loom_op_class;

/* out[rows, cols] = f(in[rows, cols]); pos/seq give each row's token (NULL where the rows are
 * a sequence-parallel shard). */
typedef void (*loom_custom_fn)(void *user, const float *in, size_t ldi, float *out, size_t ldo, int rows, int cols,
                               const int32_t *pos, const int32_t *seq);

typedef struct loom_custom_op {
    const char *name;
    loom_op_class cls;
    loom_custom_fn forward;
    void *user;
} loom_custom_op;

/* Applies op to the output of the module at `path` (e.g. "model.layers.0.mlp"), or to its first
 * input when at_input; call before building engines. Fails if no module has that path. */
LOOM_API int loom_model_add_custom(loom_model *m, const char *path, bool at_input, const loom_custom_op *op,
                                   loom_err *err);

/* Keeps plain collectives around every linear of the module at `path` under async TP (what a
 * quantized linear will need); `loom plan` reports them as not fused. */
LOOM_API int loom_model_mark_unfusable(loom_model *m, const char *path, loom_err *err);

/* Ranks. loom_launch starts tp x dp x pp ranks and runs fn in each with its communicator:
 *  - "shm" (default): forks tp rank processes on this machine sharing a memory arena; the
 *    calling process supervises them: if one dies or a collective waits past timeout_s, all
 *    are stopped and the failure is reported, naming the rank and what it was doing.
 *  - "mpi": this process is one rank of an `mpirun` job (tp x dp x pp must be its size; tp 0:
 *    the job's size / (dp x pp)).
 * Returns the job's exit status (0 when every rank's fn returned 0). Rank 0 keeps stdout;
 * the others' stdout is discarded, their errors still reach stderr. Call it before any
 * OpenMP or BLAS work in this process: forked ranks start their own thread pools. */
typedef int (*loom_rank_fn)(loom_comm *comm, void *arg);
typedef struct loom_launch_options {
    int tp;
    int pp;               /* pipeline stages (0 or 1: one) */
    int dp;               /* data-parallel replicas (0 or 1: one); the job has tp * dp * pp ranks,
                             rank = (stage * dp + replica) * tp + tp rank (docs/DESIGN.md, section 5,
                             says why this order) */
    const char *backend;  /* "shm", "mpi" */
    size_t slot_bytes;    /* largest block one rank publishes in a collective (shm) */
    double timeout_s;     /* collective deadline (default 60) */
    int spin;             /* busy-wait iterations before sleeping in a collective (default 2000) */
    bool isolate;         /* shm: fork even a single rank, leaving this process untouched */
    bool mpi_progress;    /* mpi: a progress thread in the transport, which async TP's transfers
                             and pipeline stages' hand-overs need to overlap the GEMMs after
                             them, and which slows plain collectives */
    bool forward_signals; /* shm: SIGTERM and SIGINT to the launcher go to rank 0 (which then
                             stops the job itself, as `loom serve` drains) instead of ending it */
    const char *cpu_bind; /* where each rank of this machine runs (--cpu-bind): NULL or "auto"
                             splits the cores this process may use among its ranks by the
                             topology (one NUMA node a rank when they match), binds each rank's
                             threads and memory there, and under mpirun keeps the launcher's
                             binding; "none" binds nothing; "0-7|8-15" gives each rank its PUs */
} loom_launch_options;
LOOM_API int loom_launch(const loom_launch_options *o, loom_rank_fn fn, void *arg, loom_err *err);
LOOM_API int loom_comm_rank(const loom_comm *c);
LOOM_API int loom_comm_size(const loom_comm *c);
/* The slot_bytes an engine with these options needs on each of tp (* pp) ranks. */
LOOM_API size_t loom_comm_slot_bytes(const loom_model *m, int tp, const loom_engine_options *o);
/* all[r * n + i] = rank r's mine[i], on every rank (small metadata, e.g. per-rank figures). */
LOOM_API int loom_comm_all_gather(loom_comm *c, const float *mine, int n, float *all, loom_err *err);
/* n floats from this rank to rank dst of c / from rank src, in the order sent (a data-parallel
 * replica's logits to the server's rank 0); a receive of another size is an error naming both. */
LOOM_API int loom_comm_send_floats(loom_comm *c, int dst, const float *buf, size_t n, loom_err *err);
LOOM_API int loom_comm_recv_floats(loom_comm *c, int src, float *buf, size_t n, loom_err *err);
/* The same for ints (a server's step message to a replica's ranks). */
LOOM_API int loom_comm_send_ints(loom_comm *c, int dst, const int32_t *buf, size_t n, loom_err *err);
LOOM_API int loom_comm_recv_ints(loom_comm *c, int src, int32_t *buf, size_t n, loom_err *err);
/* Rank 0's buf[0..n) to every rank (what rank 0 decided, e.g. a step every rank runs). */
LOOM_API int loom_comm_broadcast_ints(loom_comm *c, int32_t *buf, int n, loom_err *err);
/* What this rank is doing, for the message when a peer dies or a collective times out. */
LOOM_API void loom_comm_set_phase(loom_comm *c, const char *fmt, ...) LOOM_PRINTF(2, 3);
/* Checks that m can be sharded across tp ranks (and split into o's pipeline stages) with o's
 * sequence parallelism, before any weight is read. */
LOOM_API int loom_check_sharding(const loom_model *m, int tp, const loom_engine_options *o, loom_err *err);

/* Text, through the model's tokenizer.json (loom_model_options.load_tokenizer). loom_tokenize:
 * the ids of text (*ids malloc'd), with the BOS/template tokens when add_special.
 * loom_detokenize: the text of ids (malloc'd), special tokens left out when skip_special. */
LOOM_API int loom_tokenize(const loom_model *m, const char *text, bool add_special, int32_t **ids, size_t *n,
                           loom_err *err);
LOOM_API char *loom_detokenize(const loom_model *m, const int32_t *ids, size_t n, bool skip_special, loom_err *err);
/* The bytes token id adds to text mid-sequence, before UTF-8 assembly (a byte-level token may
 * hold part of a character), as grammars for structured output match them: their length (bytes
 * past cap dropped), or -1 for a special token, an id with no token, or a model without a
 * tokenizer. */
LOOM_API int loom_token_bytes(const loom_model *m, int32_t id, char *out, size_t cap);
/* Streaming detokenization: each id's piece of text as it completes (complete UTF-8: bytes that
 * start a character wait for the rest), so the pieces of a sequence spell loom_detokenize of it
 * with skip_special. Ids fed before the text that is wanted (a prompt) give its context: a
 * SentencePiece "▁was" after "The robot" keeps its space. A piece is valid until the next call. */
typedef struct loom_detokenizer loom_detokenizer;
LOOM_API loom_detokenizer *loom_detokenizer_new(const loom_model *m, loom_err *err);
LOOM_API const char *loom_detokenizer_next(loom_detokenizer *d, int32_t id, size_t *len);
/* Keep special tokens' text in the pieces (default: left out), as vLLM's
 * skip_special_tokens=False: tool-call parsers whose markers are special tokens need them. */
LOOM_API void loom_detokenizer_keep_special(loom_detokenizer *d, bool keep);
/* What is held back at the end of a sequence (an unfinished character: U+FFFD). */
LOOM_API const char *loom_detokenizer_flush(loom_detokenizer *d, size_t *len);
LOOM_API void loom_detokenizer_free(loom_detokenizer *d);

typedef struct loom_sampling {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off; tokens less likely than min_p times the most likely one are dropped */
    uint64_t seed;
    bool ignore_eos; /* keep generating past EOS */
} loom_sampling;

/* A sampler of next tokens from logits (vocab wide) with these settings, its random stream
 * seeded by seed: greedy at temperature 0, else softmax at the temperature over the min_p,
 * then top_k / top_p candidates. NULL with err for a setting out of range. */
typedef struct loom_sampler loom_sampler;
LOOM_API loom_sampler *loom_sampler_new(const loom_sampling *s, int vocab, loom_err *err);
LOOM_API int32_t loom_sampler_next(loom_sampler *s, const float *logits);
LOOM_API void loom_sampler_free(loom_sampler *s);

/* Called with each generated token and its text piece (complete UTF-8, may be empty);
 * return false to stop. */
typedef bool (*loom_token_cb)(void *user, int32_t id, const char *piece, size_t len);

typedef struct loom_gen_stats {
    int prompt_tokens, generated;
    int passes;            /* decode passes of the target (fewer than generated with speculation) */
    int drafted, accepted; /* speculative tokens proposed and accepted */
    double prefill_s, decode_s;
    bool stopped_at_eos;
} loom_gen_stats;

/* Generates up to max_new tokens after prompt (sequence slot 0, starting empty), streaming
 * through cb. With replicas in lockstep, a replica that has no more to generate calls
 * loom_engine_wait_replicas. */
LOOM_API int loom_generate(loom_engine *e, const int32_t *prompt, int n_prompt, int max_new, const loom_sampling *s,
                           loom_token_cb cb, void *user, loom_gen_stats *stats, loom_err *err);
/* The same for a vision-language model's prompt with pictures: image_rows holds one row per
 * image token of the prompt, in order (each picture's loom_encode_image features). The
 * prefill's passes end between pictures, never inside one. */
LOOM_API int loom_generate_images(loom_engine *e, const int32_t *prompt, int n_prompt, const float *image_rows,
                                  int max_new, const loom_sampling *s, loom_token_cb cb, void *user,
                                  loom_gen_stats *stats, loom_err *err);

/* Speculative decoding (vLLM's --speculative-config): a proposer guesses the next k tokens of a
 * sequence, the target verifies them all in one pass over k + 1 tokens, and keeps the longest
 * prefix it agrees with plus one token of its own, so one pass may yield up to k + 1 tokens.
 * Greedy output is the target's own; with sampling, rejection sampling (Leviathan et al.)
 * keeps the target's distribution exactly. */
#define LOOM_SPEC_MAX_TOKENS 16 /* the most num_speculative_tokens allowed */
typedef enum loom_spec_method {
    LOOM_SPEC_NGRAM = 1,   /* prompt lookup: what followed the last occurrence of the text's tail */
    LOOM_SPEC_DRAFT_MODEL, /* a smaller model with the target's tokenizer, decoding greedily */
    LOOM_SPEC_EAGLE3       /* an Eagle3 head: one layer over the target's own hidden states */
} loom_spec_method;
typedef struct loom_spec_options {
    loom_spec_method method;
    int num_speculative_tokens;               /* k, 1..LOOM_SPEC_MAX_TOKENS */
    int prompt_lookup_min, prompt_lookup_max; /* ngram: the tail lengths looked up, longest first */
    char model[1024];                         /* draft_model, eagle3: the draft's folder */
    int draft_tensor_parallel_size;           /* draft_model: 1 (every rank runs it whole) or the
                                                 target's tp (0: the target's) */
} loom_spec_options;
/* Reads vLLM's JSON ({"method": "ngram", "num_speculative_tokens": 4, ...}); the error names
 * the key at fault. */
LOOM_API int loom_spec_parse(const char *json, loom_spec_options *o, loom_err *err);

/* What the target engine must be built with for o: room for k + 1 logit rows a sequence (eo's
 * max_seqs set), and for eagle3 the hidden states its draft reads (eo's capture layers: the
 * draft's eagle_aux_hidden_state_layer_ids, or 2, L/2 and L - 3 of the target's L layers).
 * Fails, naming the field, when the draft does not fit the target (its hidden size or
 * vocabulary). */
LOOM_API int loom_spec_engine_options(const loom_spec_options *o, const loom_model *target, const loom_model *draft,
                                      loom_engine_options *eo, loom_err *err);

/* A proposer for a target engine: draft is the loaded draft model (draft_model, eagle3; NULL
 * for ngram; an Eagle3 draft is loaded with loom_model_options.embedding_from the target's
 * folder), eo the options the target engine was built with (its ranks and parallelism, which a
 * draft shares unless draft_tensor_parallel_size is 1; loom_spec_engine_options filled in).
 * Every rank of the target makes one, at the same point. */
typedef struct loom_speculator loom_speculator;
LOOM_API loom_speculator *loom_speculator_new(loom_engine *target, loom_model *draft, const loom_spec_options *o,
                                              const loom_engine_options *eo, loom_err *err);
LOOM_API void loom_speculator_free(loom_speculator *s);
/* Proposes for n sequences at once: sequence slot seqs[i] holds tokens hist[i][0..len[i])
 * (prompt and output, all but the last in the target's KV cache); up to max_draft[i] tokens
 * (at most k) go to drafts[i * k ...], their count to n_draft[i]. A draft model runs its
 * passes here, on every rank of its own. */
LOOM_API int loom_speculator_propose(loom_speculator *s, int n, const int32_t *seqs, const int32_t *const *hist,
                                     const int *len, const int *max_draft, int32_t *drafts, int *n_draft,
                                     loom_err *err);
/* Verifies one sequence's n_draft proposals against the target's logits rows [n_draft + 1][vocab]
 * (row j: after the sequence's last token and drafts[0..j)), sampling with smp: writes the
 * tokens to emit to out (the accepted drafts, then the target's own: a correction or the bonus
 * token) and returns their count, 1..n_draft + 1. The target's KV cache then holds the rejected
 * drafts too: cut it back with loom_engine_truncate_seq. */
LOOM_API int loom_speculator_verify(loom_speculator *s, loom_sampler *smp, const float *logits, const int32_t *drafts,
                                    int n_draft, int32_t *out);
/* Forgets what the proposer holds for a sequence slot (with loom_engine_reset_seq). */
LOOM_API void loom_speculator_reset_seq(loom_speculator *s, int seq);
/* vLLM's spec_decode counters since the speculator was made or its stats were reset. */
typedef struct loom_spec_stats {
    long drafts;                            /* verifications with at least one proposal */
    long draft_tokens, accepted_tokens;     /* proposed, and accepted by the target */
    long accepted_at[LOOM_SPEC_MAX_TOKENS]; /* accepted drafts by position (0: the first) */
    int k;                                  /* num_speculative_tokens */
    double propose_s;                       /* time spent proposing (a draft model's passes) */
} loom_spec_stats;
LOOM_API void loom_speculator_get_stats(const loom_speculator *s, loom_spec_stats *st);
LOOM_API void loom_speculator_reset_stats(loom_speculator *s);

/* loom_generate with speculation (s NULL: plain decoding). */
LOOM_API int loom_generate_speculative(loom_engine *e, loom_speculator *sp, const int32_t *prompt, int n_prompt,
                                       int max_new, const loom_sampling *s, loom_token_cb cb, void *user,
                                       loom_gen_stats *stats, loom_err *err);

/* What an engine is and holds on this rank, and what its forward passes did since it was made
 * or since loom_engine_reset_stats. */
typedef struct loom_engine_stats {
    int rank, ranks;       /* this rank of the job, and the job's ranks */
    int replica, replicas; /* data parallelism: this rank's replica (0 with one), and how many */
    /* the replicas run every pass together, a replica with nothing to run an empty one
     * (loom_forward with no tokens): a mixture of experts spreads its experts over them */
    bool lockstep;
    int stage, stages;                 /* pipeline parallelism: this rank's stage (0 with one), and how many */
    int max_seqs, max_ctx, max_tokens; /* sequences it holds, positions per sequence, tokens per pass */
    size_t activation_bytes, kv_bytes; /* memory for activations and for the KV cache */
    /* a hybrid model's recurrent layers: their state for all max_seqs sequences (taken from the
     * KV cache budget), and one sequence's */
    size_t state_bytes, state_bytes_per_seq;
    /* KV cache bytes one token of one sequence takes over all layers (a latent cache: one latent
     * row per layer, else K and V of this rank's kv heads) */
    size_t kv_bytes_per_token;
    /* weight bytes one decode step of one token streams: every linear (the LM head included;
     * the embedding table only gives a row) and, for mixtures, top_k of the experts */
    size_t decode_bytes;
    double blocked_seconds; /* in collectives and stage hand-overs, since the engine was made */
    /* since the reset: the share of pipelined passes' time spent waiting for the other stages
     * (the bubble), and the experts' GEMMs: their time (with routing under TP-MoE), GFLOP and
     * (token, expert) pairs computed, whose spread over the ranks is the expert load imbalance */
    double pipeline_idle;
    double expert_seconds, expert_gflop;
    long expert_pairs;
} loom_engine_stats;
LOOM_API void loom_engine_get_stats(const loom_engine *e, loom_engine_stats *st);
LOOM_API void loom_engine_reset_stats(loom_engine *e);

/* Prints the module tree and rank 0's plan for tp ranks with o's parallelism (steps,
 * collectives, buffers; with sequence parallelism its regions, the safety verdicts and warnings;
 * with async TP what was fused; with pipeline stages each stage's layers, ranks and what
 * crosses each boundary) to f. */
LOOM_API int loom_print_plan(loom_model *m, int tp, const loom_engine_options *o, FILE *f, loom_err *err);

/* Expert load profiles: for each mixture-of-experts layer (named by module), the tokens routed
 * to each expert. loom_engine_expert_load: the engine's since its stats were reset, summed over
 * the ranks its experts are spread over (a collective of those ranks; the layers of this rank's
 * pipeline stage; needs the experts spread over ranks: expert parallelism, or replicas). The file is JSON (runtime/expert_load.c);
 * loom_expert_load_read checks every field and names the one at fault. */
LOOM_API loom_expert_load *loom_engine_expert_load(loom_engine *e, loom_err *err);
LOOM_API loom_expert_load *loom_expert_load_read(const char *path, loom_err *err);
LOOM_API int loom_expert_load_write(const loom_expert_load *l, const char *path, loom_err *err);
LOOM_API void loom_expert_load_free(loom_expert_load *l);

/* A data-parallel server's scheduler decides for replicas it does not run. A mirror is an engine
 * that runs nothing: it keeps the KV cache bookkeeping of an engine like `like` (a pool of the
 * same blocks, the same sequences), changed by the same calls (loom_engine_reset_seq,
 * loom_engine_attach_prefix, loom_engine_truncate_seq), and loom_forward on it checks a batch
 * and records it as the engine would, without computing (no logits). Given every call the
 * replica's engines get, in the same order, it takes their decisions (loom_engine_match_prefix,
 * loom_engine_get_kv_stats) without being told them. */
LOOM_API loom_engine *loom_engine_mirror_new(const loom_engine *like, loom_err *err);

/* Forgets what sequence slot `seq` holds (its positions restart at 0) and gives its KV cache
 * blocks back to the pool; with prefix caching, its full blocks stay cached there until their
 * room is needed, least recently used first. */
LOOM_API void loom_engine_reset_seq(loom_engine *e, int seq);

/* The paged KV cache: one pool of blocks of block_size positions per rank, which sequences
 * take from as they grow. */
typedef struct loom_kv_stats {
    int block_size, blocks; /* the pool */
    loom_kv_dtype dtype;    /* how it holds K and V */
    int blocks_used;        /* held by sequences */
    int blocks_cached;      /* full blocks a new sequence can reuse (prefix caching), held or not */
    long evicted;           /* cached blocks given to other positions since the engine was made */
    bool prefix_caching;    /* full blocks are keyed and matched (loom_engine_match_prefix) */
    const char *uncached;   /* prefix caching was asked for but is off: why (else NULL) */
} loom_kv_stats;
LOOM_API void loom_engine_get_kv_stats(const loom_engine *e, loom_kv_stats *st);
/* A hash of the KV cache's bookkeeping (sequences' blocks, block states and keys, the free
 * list's order): the ranks of a replica, and rank 0's mirror of it, agree on it after the same
 * steps (loom serve prints each at exit). */
LOOM_API unsigned long long loom_engine_kv_digest(const loom_engine *e);
/* Prefix caching: the cached blocks holding the longest prefix of tokens[0..n) in whole
 * blocks, into blocks (room for n / block_size); their count (0 without prefix caching).
 * Changes nothing. Pass n - 1 tokens for a prompt whose last token must run for its logits. */
LOOM_API int loom_engine_match_prefix(const loom_engine *e, const int32_t *tokens, int n, int32_t *blocks);
/* Starts the empty sequence slot `seq` with blocks[0..n) (from loom_engine_match_prefix): it
 * holds n * block_size positions, and its next token goes to the position after them. Under
 * tensor or pipeline parallelism every rank attaches the same blocks, at the same point in its
 * sequence of calls, as rank 0 matched them. */
LOOM_API int loom_engine_attach_prefix(loom_engine *e, int seq, const int32_t *blocks, int n, loom_err *err);
/* Cuts sequence slot `seq` back to its first len positions (len at most what it holds), as
 * after speculative tokens the target rejected: the blocks past them go back to the pool, and a
 * block they leave partly written stops being a cached prefix. Every rank cuts alike. */
LOOM_API int loom_engine_truncate_seq(loom_engine *e, int seq, int len, loom_err *err);

/* The CPU and the variant of loom's kernels chosen for it at start-up: the best it runs, or the
 * one the LOOM_CPU environment variable names (generic, avx2, avx2vnni, avx512, avx512bf16, neon
 * or neondot). Fails when
 * LOOM_CPU names a variant this build lacks or this CPU cannot run; loom_model_load fails then
 * too, with the same message. */
typedef struct loom_cpu_info {
    char model[128];     /* as the OS reports it */
    const char *variant; /* in use */
    char runnable[128];  /* every variant this CPU runs, best first (filled even on failure) */
    char gemm[128];      /* the kernels the GEMM libraries chose for this CPU themselves, as
                            "OpenBLAS Cooperlake, oneDNN avx512_core_amx" (filled even on failure) */
} loom_cpu_info;
LOOM_API int loom_cpu_get_info(loom_cpu_info *info, loom_err *err);

#ifdef __cplusplus
}
#endif
#endif
