/* The FP8 checkpoint formats' reader (rows of checkpoint.c's table): a rank's slice of a
 * compressed-tensors float-quantized linear or of the "fp8" method's, into loom's layout
 * (qmat_build) with FP8 codes. The tensors, as compressed-tensors and vLLM store them:
 *   <module>.weight           F8_E4M3 (or F8_E5M2) [out, in], one byte a weight;
 *   <module>.weight_scale     strategy tensor: [] or [1]; channel: [out, 1] or [out];
 *                             block [bh, bw]: [ceil(out / bh), ceil(in / bw)];
 *   <module>.weight_scale_inv the fp8 method's block scales, the same shape; despite the name
 *                             each block is multiplied by it, as vLLM and transformers do;
 *   <module>.input_scale      [] or [1], static activations only.
 * Scales may be F32, BF16 or F16. A weight is fp8(q) * scale in fp32, one rounding, as the
 * reference dequantizes it. Blocks may straddle a rank's boundary on either side: the packed
 * layout pads any partial group, so each rank keeps the scales of the rows and columns it
 * holds and nothing needs whole blocks. A code that is a NaN or an infinity, or a scale that
 * is not finite, is an error naming the tensor and the element. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "quant/reader.h"
#include "tensor/fp8.h"
#include "util/err.h"

typedef struct fp8_ckpt {
    const st_tensor *w, *s;
    const char *mod, *scale_name;
    enum qcode code;
    int cols, r0, c0, nc, block_rows, scale_cols; /* block_rows: rows per scale row (0: one scale) */
} fp8_ckpt;

static int fp8_row(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    const fp8_ckpt *k = ctx;
    int o = k->r0 + r;
    const uint8_t *row = (const uint8_t *)k->w->data + (size_t)o * k->cols + k->c0;
    for (int c = 0; c < k->nc; c++) {
        if (!fp8_finite(row[c], k->code))
            return loom_errf(err, "tensor '%s.weight' holds a NaN or an infinity at [%d, %d]", k->mod, o, k->c0 + c);
        codes[c] = row[c];
    }
    size_t at = k->block_rows ? (size_t)(o / k->block_rows) * k->scale_cols : 0;
    for (int g = 0; g < k->scale_cols; g++) {
        scale[g] = ckpt_real(k->s, at + g);
        zero[g] = 0;
        if (!isfinite(scale[g]))
            return loom_errf(err, "tensor '%s.%s': scale %zu is not finite", k->mod, k->scale_name, at + g);
    }
    return 0;
}

static bool is_float(const st_tensor *t) { return t->dtype == DT_F32 || t->dtype == DT_BF16 || t->dtype == DT_F16; }

/* Scale tensor `suffix` of `mod`: a float tensor of n elements whose shape is [d0, d1] (either
 * 0: a scalar, [] or [1]), where d1 may also be left out when it is 1. */
static int need_scale(weight_store *ws, const char *mod, const char *suffix, int64_t d0, int64_t d1,
                      const st_tensor **out, loom_err *err) {
    const char *file = ws->dir;
    const st_tensor *t = *out = ckpt_part(ws, mod, suffix, &file);
    if (!t) return loom_errf(err, "%s: missing tensor '%s.%s'", ws->dir, mod, suffix);
    if (!is_float(t))
        return loom_errf(err, "%s: tensor '%s.%s' has dtype %s, expected F32, F16 or BF16", file, mod, suffix,
                         dtype_name(t->dtype));
    bool ok =
        d0 ? (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1) || (d1 == 1 && t->ndim == 1 && t->shape[0] == d0)
           : t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1);
    if (!ok) {
        char got[96];
        ckpt_shape(t, got, sizeof got);
        if (d0)
            return loom_errf(err, "%s: tensor '%s.%s' has shape [%s], expected [%lld, %lld]", file, mod, suffix, got,
                             (long long)d0, (long long)d1);
        return loom_errf(err, "%s: tensor '%s.%s' has shape [%s], expected a scalar ([] or [1])", file, mod, suffix,
                         got);
    }
    return 0;
}

static int fp8_get(weight_store *ws, const quant_config *q, const char *name, const ckpt_slice *sl, wmat *out,
                   loom_err *err) {
    int rows = sl->rows, cols = sl->cols, r0 = sl->r0, nr = sl->nr, c0 = sl->c0, nc = sl->nc;
    char mod[256];
    ckpt_module_of(name, mod, sizeof mod);
    const char *file = ws->dir;
    const st_tensor *w = ckpt_part(ws, mod, "weight", &file), *s, *in = NULL;
    if (!w) return loom_errf(err, "%s: missing tensor '%s.weight'", ws->dir, mod);
    if (w->dtype != DT_F8_E4M3 && w->dtype != DT_F8_E5M2)
        return loom_errf(err, "%s: tensor '%s.weight' has dtype %s, expected F8_E4M3 or F8_E5M2 (%s)", file, mod,
                         dtype_name(w->dtype), quant_format_name(q->format));
    if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols) {
        char got[96];
        ckpt_shape(w, got, sizeof got);
        return loom_errf(err, "%s: tensor '%s.weight' has shape [%s], expected [%d, %d]", file, mod, got, rows, cols);
    }
    fp8_ckpt k = {w,
                  NULL,
                  mod,
                  q->format == QF_FP8 && q->fp8_scale == FP8_BLOCK ? "weight_scale_inv" : "weight_scale",
                  w->dtype == DT_F8_E5M2 ? QCODE_E5M2 : QCODE_E4M3,
                  cols,
                  r0,
                  c0,
                  nc,
                  0,
                  1};
    int bh = q->fp8_block[0], bw = q->fp8_block[1], rc = 0;
    switch (q->fp8_scale) {
    case FP8_TENSOR: rc = need_scale(ws, mod, k.scale_name, 0, 0, &s, err); break;
    case FP8_CHANNEL:
        rc = need_scale(ws, mod, k.scale_name, rows, 1, &s, err);
        k.block_rows = 1;
        break;
    case FP8_BLOCK:
        k.block_rows = bh, k.scale_cols = (cols + bw - 1) / bw;
        rc = need_scale(ws, mod, k.scale_name, (rows + bh - 1) / bh, k.scale_cols, &s, err);
        break;
    }
    if (rc || (q->fp8_act == FP8_ACT_STATIC && need_scale(ws, mod, "input_scale", 0, 0, &in, err))) return -1;
    k.s = s;
    float in_scale = in ? ckpt_real(in, 0) : 0;
    if (in && !(isfinite(in_scale) && in_scale > 0))
        return loom_errf(err, "tensor '%s.input_scale' is %g, not a positive finite scale", mod, in_scale);
    qsource src = {.bits = 8,
                   .rows = nr,
                   .cols = nc,
                   .col0 = c0,
                   .n_groups = k.scale_cols,
                   .group_size = q->fp8_scale == FP8_BLOCK ? bw : cols,
                   .ctx = &k,
                   .row = fp8_row,
                   .code = k.code,
                   .in_scale = in_scale,
                   .in_group = q->fp8_act == FP8_ACT_GROUP ? q->act_group : 0};
    return qmat_build(ws, &src, out, err) ? loom_err_prefix(err, "%s", mod) : 0;
}

/* the "fp8" method never quantizes the head (vLLM's lm_head takes no quantization from it);
 * compressed-tensors does unless its ignore list names it */
static bool fp8_head(const quant_config *q) { return q->format != QF_FP8; }

/* a code a byte, scales per row or block, partial blocks padded: any split */
static int fp8_check(const quant_config *q, const char *name, const ckpt_slice *s, loom_err *err) {
    (void)q, (void)name, (void)s, (void)err;
    return 0;
}

/* FP8 weights, even without their scale (the reader then names it), or the scale alone */
static bool fp8_has(weight_store *ws, const quant_config *q, const char *name) {
    char mod[256];
    ckpt_module_of(name, mod, sizeof mod);
    const st_tensor *w = ckpt_part(ws, mod, "weight", NULL);
    if (w && (w->dtype == DT_F8_E4M3 || w->dtype == DT_F8_E5M2)) return true;
    return ckpt_part(ws, mod, q->format == QF_FP8 && q->fp8_scale == FP8_BLOCK ? "weight_scale_inv" : "weight_scale",
                     NULL);
}

const ckpt_reader fp8_reader = {.head = fp8_head, .check = fp8_check, .has = fp8_has, .get = fp8_get};
