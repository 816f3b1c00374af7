/* Gemma 3's vision tower (SigLIP) and projector, as transformers' Gemma3Model.get_image_features:
 * the picture cut into patches, each a linear image of its pixels (the patch convolution) plus
 * its position's embedding; encoder layers of LayerNorm, attention in which every patch sees
 * every other, and a GELU MLP, each a residual branch; a final LayerNorm; then the projector,
 * an average over each square of patches that makes a token, the soft-embedding RMSNorm (by
 * 1 + w) and the projection to the text model's width. The attention is the text model's kernel
 * (attend) with every query reaching the last patch. Sharded, a rank runs its heads and its MLP
 * features (column-parallel q/k/v and fc1, row-parallel out_proj and fc2, whose biases join
 * after the all-reduce), as the text model's layers shard. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/vision.h"
#include "util/alloc.h"
#include "util/err.h"

#define VISION_QB 32 /* queries per attention task */

/* The checkpoint's names: transformers 5 saves the tower at vision_tower., released Gemma 3
 * folders at vision_tower.vision_model.; either under model. too */
static const char *tower_prefix(const weight_store *ws) {
    static const char *const p[] = {"vision_tower.vision_model.", "model.vision_tower.vision_model.", "vision_tower.",
                                    "model.vision_tower."};
    char name[256];
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) {
        snprintf(name, sizeof name, "%sembeddings.patch_embedding.weight", p[i]);
        if (weights_has(ws, name)) return p[i];
    }
    return p[0]; /* dummy weights, or an error naming the released layout's tensor */
}

static const char *projector_prefix(const weight_store *ws) {
    return weights_has(ws, "model.multi_modal_projector.mm_input_projection_weight") ? "model.multi_modal_projector."
                                                                                     : "multi_modal_projector.";
}

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a [rows, cols] linear (nr or nc 0: all) */
static int get_mat(weight_store *ws, const char *prefix, const char *name, int rows, int cols, int r0, int nr, int c0,
                   int nc, wmat *out, loom_err *err) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return weights_get(ws, full, rows, cols, r0, nr, c0, nc, false, 0.02f, out, err);
}

/* Entries [r0, r0 + n) of a vector of `rows` in f32 (n 0: all); init as weights_get's (-1: a
 * dummy norm's ones) */
static int get_vec(weight_store *ws, const char *prefix, const char *name, int rows, int r0, int n, float init,
                   const float **out, loom_err *err) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    wmat w;
    if (weights_get(ws, full, rows, 0, r0, n, 0, 0, true, init, &w, err)) return -1;
    *out = w.data;
    return 0;
}

bool vision_shards(const vision_config *v, int tp) { return v->n_heads % tp == 0 && v->intermediate % tp == 0; }

static int load_layer(vision_layer *l, weight_store *ws, const char *tower, int i, const vision_tower *t,
                      loom_err *err) {
    char p[200];
    snprintf(p, sizeof p, "%sencoder.layers.%d.", tower, i);
    int d = t->cfg.hidden, f = t->cfg.intermediate, dr = d / t->tp, fr = f / t->tp, d0 = dr * t->rank,
        f0 = fr * t->rank;
    return get_vec(ws, p, "layer_norm1.weight", d, 0, 0, -1, &l->ln1_w, err) ||
                   get_vec(ws, p, "layer_norm1.bias", d, 0, 0, 0.02f, &l->ln1_b, err) ||
                   get_vec(ws, p, "layer_norm2.weight", d, 0, 0, -1, &l->ln2_w, err) ||
                   get_vec(ws, p, "layer_norm2.bias", d, 0, 0, 0.02f, &l->ln2_b, err) ||
                   get_mat(ws, p, "self_attn.q_proj.weight", d, d, d0, dr, 0, 0, &l->q, err) ||
                   get_mat(ws, p, "self_attn.k_proj.weight", d, d, d0, dr, 0, 0, &l->k, err) ||
                   get_mat(ws, p, "self_attn.v_proj.weight", d, d, d0, dr, 0, 0, &l->v, err) ||
                   get_mat(ws, p, "self_attn.out_proj.weight", d, d, 0, 0, d0, dr, &l->o, err) ||
                   get_vec(ws, p, "self_attn.q_proj.bias", d, d0, dr, 0.02f, &l->q_b, err) ||
                   get_vec(ws, p, "self_attn.k_proj.bias", d, d0, dr, 0.02f, &l->k_b, err) ||
                   get_vec(ws, p, "self_attn.v_proj.bias", d, d0, dr, 0.02f, &l->v_b, err) ||
                   get_vec(ws, p, "self_attn.out_proj.bias", d, 0, 0, 0.02f, &l->o_b, err) ||
                   get_mat(ws, p, "mlp.fc1.weight", f, d, f0, fr, 0, 0, &l->fc1, err) ||
                   get_vec(ws, p, "mlp.fc1.bias", f, f0, fr, 0.02f, &l->fc1_b, err) ||
                   get_mat(ws, p, "mlp.fc2.weight", d, f, 0, 0, f0, fr, &l->fc2, err) ||
                   get_vec(ws, p, "mlp.fc2.bias", d, 0, 0, 0.02f, &l->fc2_b, err)
               ? -1
               : 0;
}

/* A matrix read whole as f32 into a buffer the store owns (the patch convolution, read as
 * [hidden, 3 x patch x patch]), transposed where the checkpoint holds x @ W's W (the projection). */
static int get_f32(weight_store *ws, const char *name, int ndim, const int *shape, int rows, int cols, bool transpose,
                   wmat *out, loom_err *err) {
    float *buf = weights_buffer(ws, (size_t)rows * cols * sizeof(float), name, err);
    float *tmp = transpose ? mem_array((size_t)rows * cols, sizeof(float), name, err) : buf;
    if (!buf || !tmp) return -1;
    int rc = weights_read_f32(ws, name, ndim, shape, transpose ? rows : cols, 0, transpose ? cols : rows, 0,
                              transpose ? rows : cols, 0.02f, tmp, err);
    if (!rc && transpose)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) buf[(size_t)r * cols + c] = tmp[(size_t)c * rows + r];
    if (transpose) free(tmp);
    *out = (wmat){.dt = DT_F32, .rows = rows, .cols = cols, .ld = (size_t)cols, .data = buf};
    return rc;
}

int vision_tower_load(vision_tower *t, const model_config *c, weight_store *ws, int rank, int tp, loom_err *err) {
    memset(t, 0, sizeof *t);
    const vision_config *v = &c->vision;
    t->cfg = *v;
    t->text_hidden = c->hidden;
    t->rank = rank, t->tp = tp;
    const char *tower = tower_prefix(ws), *proj = projector_prefix(ws);
    int d = v->hidden, pp = v->channels * v->patch_size * v->patch_size;
    int side = v->image_size / v->patch_size, n = side * side;
    char name[256];
    snprintf(name, sizeof name, "%sembeddings.patch_embedding.weight", tower);
    int conv[4] = {d, v->channels, v->patch_size, v->patch_size};
    if (get_f32(ws, name, 4, conv, d, pp, false, &t->patch, err) ||
        get_vec(ws, tower, "embeddings.patch_embedding.bias", d, 0, 0, 0.02f, &t->patch_b, err))
        return loom_err_prefix(err, "the vision tower");
    wmat pos;
    snprintf(name, sizeof name, "%sembeddings.position_embedding.weight", tower);
    if (weights_get(ws, name, n, d, 0, 0, 0, 0, true, 0.02f, &pos, err))
        return loom_err_prefix(err, "the vision tower");
    t->pos = pos.data;
    if (!(t->layers = mem_zalloc((size_t)v->n_layers, sizeof *t->layers, "the vision tower's layers", err))) return -1;
    for (int i = 0; i < v->n_layers; i++)
        if (load_layer(&t->layers[i], ws, tower, i, t, err)) return loom_err_prefix(err, "the vision tower");
    if (get_vec(ws, tower, "post_layernorm.weight", d, 0, 0, -1, &t->post_w, err) ||
        get_vec(ws, tower, "post_layernorm.bias", d, 0, 0, 0.02f, &t->post_b, err))
        return loom_err_prefix(err, "the vision tower");
    const float *w;
    if (get_vec(ws, proj, "mm_soft_emb_norm.weight", d, 0, 0, 0.02f, &w, err))
        return loom_err_prefix(err, "the projector");
    if (!(t->soft_norm = mem_array((size_t)d, sizeof(float), "the soft-embedding norm", err))) return -1;
    for (int i = 0; i < d; i++) t->soft_norm[i] = 1.0f + w[i]; /* Gemma3RMSNorm's fp32 1 + w */
    snprintf(name, sizeof name, "%smm_input_projection_weight", proj);
    int pshape[2] = {d, c->hidden};
    if (get_f32(ws, name, 2, pshape, c->hidden, d, true, &t->proj, err)) return loom_err_prefix(err, "the projector");
    return 0;
}

void vision_tower_free(vision_tower *t) {
    free(t->layers);
    free(t->soft_norm);
    memset(t, 0, sizeof *t);
}

/* Every patch attends to every patch: per head and block of queries, attend() with each query's
 * reach the last patch (reach: n of them, all n - 1). */
static void attend_all(const float *q, const float *k, const float *v, float *out, int n, int d, int heads,
                       const int32_t *reach) {
    int hd = d / heads, blocks = (n + VISION_QB - 1) / VISION_QB;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < heads * blocks; t++) {
        int h = t / blocks, r0 = t % blocks * VISION_QB, rows = n - r0 < VISION_QB ? n - r0 : VISION_QB;
        attend(&(attend_task){.q = q + (size_t)r0 * d + (size_t)h * hd,
                              .ldq = (size_t)d,
                              .rows = rows,
                              .g = 1,
                              .qk_dim = hd,
                              .v_dim = hd,
                              .p0 = r0,
                              .scale = scale,
                              .k = k + (size_t)h * hd,
                              .v = v + (size_t)h * hd,
                              .ldk = (size_t)d,
                              .ldv = (size_t)d,
                              .out = out + (size_t)r0 * d + (size_t)h * hd,
                              .ldo = (size_t)d,
                              .head_stride = (size_t)hd,
                              .reach = reach + r0});
    }
}

/* A row-parallel linear's end: the ranks' partial sums added (in row chunks the shm slot
 * holds), then the bias, then the residual x. p is this rank's partial, overwritten. */
static int reduce_into(const vision_tower *t, loom_comm *comm, float *p, const float *bias, float *x, int n,
                       loom_err *err) {
    int d = t->cfg.hidden;
    for (int r0 = 0; t->tp > 1 && r0 < n; r0 += VISION_REDUCE_ROWS) {
        int rows = n - r0 < VISION_REDUCE_ROWS ? n - r0 : VISION_REDUCE_ROWS;
        if (comm_all_reduce(comm, p + (size_t)r0 * d, d, p + (size_t)r0 * d, d, rows, d, err)) return -1;
    }
    add_rows(p, d, bias, 0, p, d, n, d);
    add_rows(x, d, p, d, x, d, n, d);
    return 0;
}

/* One encoder layer on this rank's heads and MLP features (all of them at tp 1) */
static int encoder_layer(const vision_tower *t, const vision_layer *l, loom_comm *comm, float *x, float *h, float *q,
                         float *k, float *val, float *a, float *f, int n, const int32_t *reach, loom_err *err) {
    const vision_config *v = &t->cfg;
    int d = v->hidden, dr = d / t->tp, fr = v->intermediate / t->tp;
    layer_norm(x, d, h, d, n, d, l->ln1_w, l->ln1_b, v->eps);
    linear(h, d, n, n, &l->q, l->q_b, q, dr);
    linear(h, d, n, n, &l->k, l->k_b, k, dr);
    linear(h, d, n, n, &l->v, l->v_b, val, dr);
    attend_all(q, k, val, a, n, dr, v->n_heads / t->tp, reach);
    linear(a, dr, n, n, &l->o, NULL, h, d);
    if (reduce_into(t, comm, h, l->o_b, x, n, err)) return -1;
    layer_norm(x, d, h, d, n, d, l->ln2_w, l->ln2_b, v->eps);
    linear(h, d, n, n, &l->fc1, l->fc1_b, f, fr);
    gelu_tanh_rows(f, fr, f, fr, n, fr);
    linear(f, fr, n, n, &l->fc2, NULL, h, d);
    return reduce_into(t, comm, h, l->fc2_b, x, n, err);
}

/* The patches as rows of (channel, y, x) pixels, row-major over the grid */
static void cut_patches(const vision_config *v, const float *pixels, float *out) {
    int ps = v->patch_size, side = v->image_size / ps, s = v->image_size, pp = 3 * ps * ps;
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *o = out + (size_t)(py * side + px) * pp;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < ps; y++)
                    memcpy(o + (c * ps + y) * ps, pixels + ((size_t)c * s + py * ps + y) * s + px * ps, ps * sizeof *o);
        }
}

/* The projector's average over each kernel x kernel square of patches, in torch's order (rows
 * of the square, then columns), divided by its count */
static void pool_tokens(const vision_config *v, const float *x, float *out) {
    int d = v->hidden, side = v->image_size / v->patch_size, per = (int)lround(sqrt((double)v->tokens_per_image));
    int kn = side / per;
    for (int ty = 0; ty < per; ty++)
        for (int tx = 0; tx < per; tx++) {
            float *o = out + (size_t)(ty * per + tx) * d;
            for (int c = 0; c < d; c++) {
                float s = 0;
                for (int ky = 0; ky < kn; ky++)
                    for (int kx = 0; kx < kn; kx++) s += x[(size_t)((ty * kn + ky) * side + tx * kn + kx) * d + c];
                o[c] = s / (float)(kn * kn);
            }
        }
}

int vision_encode(const vision_tower *t, loom_comm *comm, const float *pixels, float *features, loom_err *err) {
    const vision_config *v = &t->cfg;
    int d = v->hidden, side = v->image_size / v->patch_size, n = side * side, pp = 3 * v->patch_size * v->patch_size;
    size_t wide = (size_t)(pp > v->intermediate ? pp : v->intermediate);
    float *x = mem_array((size_t)n, (size_t)d * sizeof(float), "the vision tower's activations", err);
    float *h = mem_array((size_t)n * 5, (size_t)d * sizeof(float), "the vision tower's activations", err);
    float *f = mem_array((size_t)n, wide * sizeof(float), "the vision tower's activations", err);
    int32_t *reach = mem_array((size_t)n, sizeof(int32_t), "the vision tower's activations", err);
    int rc = -1;
    if (!x || !h || !f || !reach) goto done;
    float *q = h + (size_t)n * d, *k = q + (size_t)n * d, *val = k + (size_t)n * d, *a = val + (size_t)n * d;
    for (int i = 0; i < n; i++) reach[i] = n - 1;
    cut_patches(v, pixels, f);
    linear(f, pp, n, n, &t->patch, t->patch_b, x, d);
    add_rows(x, d, t->pos, d, x, d, n, d);
    for (int l = 0; l < v->n_layers; l++)
        if (encoder_layer(t, &t->layers[l], comm, x, h, q, k, val, a, f, n, reach, err)) goto done;
    layer_norm(x, d, x, d, n, d, t->post_w, t->post_b, v->eps);
    pool_tokens(v, x, h);
    rms_norm(h, d, h, d, v->tokens_per_image, d, d, t->soft_norm, false, v->eps);
    linear(h, d, v->tokens_per_image, v->tokens_per_image, &t->proj, NULL, features, t->text_hidden);
    rc = kernel_scratch_check(err);
done:
    free(x), free(h), free(f), free(reach);
    return rc;
}
