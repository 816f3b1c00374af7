/* Weight storage: the safetensors files of a model folder (single or sharded through
 * model.safetensors.index.json), or the embedded default model, or seeded dummy weights.
 * Matrices reach the kernels as wmat: f32 or bf16 rows, pointing into the mapping when the
 * on-disk dtype can be used as is. */
#ifndef LOOM_MODEL_WEIGHTS_H
#define LOOM_MODEL_WEIGHTS_H
#include "model/safetensors.h"

enum weight_dtype { WDT_AUTO, WDT_BF16 }; /* what float linears are kept in: as stored, or bf16 */

/* What linears are quantized to at load (--quantization; quant/quant.h). */
typedef struct quant_scheme {
    int bits;        /* 0: float weights as stored */
    int group;       /* columns per scale; 0: one per output channel */
    bool head;       /* the LM head and embedding table too, at 8 bits per channel */
    enum qcode code; /* QCODE_E4M3: FP8 codes (--quantization fp8), scale amax / 448; QCODE_E2M1:
                        MXFP4's (--quantization mxfp4), groups of 32, power-of-two scales */
    /* FP8: the activations' scheme for --fp8-activations, as qlayout keeps it: dynamic per token
     * for --quantization fp8; dummy weights of an FP8 checkpoint take its config's, a static
     * scale being DUMMY_INPUT_SCALE */
    float in_scale;
    int in_group;
    bool experts_only; /* only stacked expert tensors (dummy weights of an MXFP4 checkpoint) */
} quant_scheme;

/* Dummy FP8 weights' static input scale: unit-variance activations reach about 4 */
#define DUMMY_INPUT_SCALE (4.0f / 448)

/* A matrix made at load (quantized, or converted to another dtype), kept so that a second plan
 * over the same slices (the engine's plain-TP plan beside its SP one) and a tied embedding and
 * LM head read it once. */
typedef struct wmat_made {
    char name[256];
    int r0, nr, c0, nc;
    wmat w;
} wmat_made;

typedef struct weight_store {
    char dir[4096]; /* the folder, or what else the weights come from, for messages */
    st_file *files;
    int n_files;
    size_t cap_files, cap_used;
    bool **used; /* per file, per tensor: claimed by the model */
    bool dummy;
    uint64_t seed;
    enum weight_dtype keep;
    bool exact;   /* --dtype float32: every linear computes on fp32 activations (runtime/bind.c) */
    bool fp8_act; /* --fp8-activations: FP8 linears on FP8 activations */
    quant_scheme quant;
    struct dummy_entry *dummies; /* generated tensors, so a tied table is made once */
    int n_dummies;
    size_t cap_dummies;
    wmat_made *made;
    int n_made;
    size_t cap_made;
    void **owned; /* converted or generated buffers */
    int n_owned;
    size_t cap_owned;
    size_t bytes_owned, bytes_mapped_used;
} weight_store;

int weights_open_dir(weight_store *w, const char *dir, loom_err *err);
int weights_open_image(weight_store *w, const void *buf, size_t size, const char *name, loom_err *err);
/* Adds an opened file (a GGUF part as gguf_model.c renames it), which the store then owns: closed
 * by weights_close, or here on failure. */
int weights_add_file(weight_store *w, st_file *f, loom_err *err);
/* Adds another model's folder to an open store, for the few tensors a model shares with it (an
 * Eagle3 draft's embedding, the target's); its other tensors are not reported unused. */
int weights_borrow_dir(weight_store *w, const char *dir, loom_err *err);
void weights_init_dummy(weight_store *w, uint64_t seed);
void weights_close(weight_store *w);

/* Fetches tensor `name` of exact shape [rows, cols] (cols 0: a vector of rows), taking rows
 * [r0, r0+nr) and columns [c0, c0+nc) (nr/nc 0: all). as_f32 forces an f32 copy (norms,
 * biases, embeddings); otherwise linears stay bf16 where the store keeps them so. For dummy
 * stores the values are generated: `init` is the scale, or the constant 1 for norms (init<0). */
int weights_get(weight_store *w, const char *name, int rows, int cols, int r0, int nr, int c0, int nc, bool as_f32,
                float init, wmat *out, loom_err *err);
/* The same slice of tensor `name` (ndim dimensions `shape`, read as [rows, cols]) as f32 into
 * dst (nr x nc), nothing kept: what quantizing at load reads. */
int weights_read_f32(weight_store *w, const char *name, int ndim, const int *shape, int cols, int r0, int nr, int c0,
                     int nc, float init, float *dst, loom_err *err);
/* Tensor `name` as the files hold it (any dtype, marked used), its file in *file; NULL if no
 * file has it. What the quantized formats' readers start from. */
const st_tensor *weights_tensor(weight_store *w, const char *name, const char **file);
/* Tensor `name`'s GGUF block type (a ggml type number), 0 for a plain dtype or no such tensor;
 * nothing is marked used. A quant_config's gguf_type. */
int weights_gguf_type(const void *store, const char *name);
/* Whether the files hold tensor `name` (dummy stores hold none); nothing is marked used. */
bool weights_has(const weight_store *w, const char *name);
/* The matrix made earlier over these slices of `name`: quantized ones (any format), or else
 * converted ones of dtype dt. */
bool weights_made_find(const weight_store *w, const char *name, int r0, int nr, int c0, int nc, bool quantized,
                       enum dtype dt, wmat *out);
int weights_made_keep(weight_store *w, const char *name, int r0, int nr, int c0, int nc, const wmat *m, loom_err *err);
/* A buffer owned by the store until weights_close (64-byte aligned; 2 MiB and up on huge pages);
 * NULL with err set ("cannot allocate N bytes for what") when out of memory. */
void *weights_buffer(weight_store *w, size_t bytes, const char *what, loom_err *err);
/* Rows [r0, r0 + nr) of a [shape[0], shape[1], shape[2]] tensor read as [shape[0] x shape[1],
 * shape[2]], in f32 (a depthwise convolution's [channels, 1, kernel] weight). */
int weights_get_stacked_f32(weight_store *w, const char *name, const int shape[3], int r0, int nr, float init,
                            wmat *out, loom_err *err);
/* Rows [r0, r0+nr) x columns [c0, c0+nc) of expert `expert`'s [rows, cols] matrix in a stacked
 * [n_experts, rows, cols] tensor (GraniteMoE's experts), as weights_get fetches a linear. */
int weights_get_expert(weight_store *w, const char *name, int n_experts, int expert, int rows, int cols, int r0, int nr,
                       int c0, int nc, float init, wmat *out, loom_err *err);
/* Names of tensors in the files that the model never asked for (NULL-terminated, malloc'd);
 * NULL when out of memory. */
char **weights_unused(const weight_store *w);
/* The module tree's name of checkpoint tensor `file_name`: the file's "backbone.",
 * "model.language_model." or "language_model.model." as "model." (in buf), other names as they
 * are. */
const char *weights_tree_name(const char *file_name, char *buf, size_t cap);

#endif
