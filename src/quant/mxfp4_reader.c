/* The MXFP4 checkpoint format's reader (a row of checkpoint.c's table; quant_method "mxfp4":
 * GPT-OSS's experts as released): a rank's slice of a stacked expert tensor into loom's layout
 * (qmat_build) with FP4 codes. A tensor `<name>`, read as a matrix of [experts x rows, cols],
 * is stored as
 *   <name>_blocks  U8 [experts, rows, cols / 32, 16]: per 32 input features 16 bytes, byte i
 *                  holding feature 2i's E2M1 code in its low nibble and 2i + 1's in its high one;
 *   <name>_scales  U8 [experts, rows, cols / 32]: the block's E8M0 exponent e, the weights being
 *                  e2m1(code) * 2^(e - 127) (transformers' and the reference's dequantization).
 * One quantization group a block, scale 2^(e - 127), no zero point: exact. A slice keeps whole
 * blocks (mx_check) and may take every row_step-th row (GPT-OSS interleaves its gate and up
 * rows). An exponent of 255 (E8M0's NaN) is an error naming the tensor and block. */
#include <math.h>
#include <stdio.h>

#include "quant/reader.h"
#include "util/err.h"

#define MX_BLOCK 32

typedef struct mx_ckpt {
    const st_tensor *blocks, *scales;
    const char *name;
    int groups, r0, row_step, c0, nc;
} mx_ckpt;

static int mx_row(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    const mx_ckpt *k = ctx;
    size_t o = (size_t)k->r0 + (size_t)r * k->row_step;
    const uint8_t *bytes = (const uint8_t *)k->blocks->data + o * k->groups * (MX_BLOCK / 2);
    const uint8_t *exps = (const uint8_t *)k->scales->data + o * k->groups;
    for (int c = 0; c < k->nc; c++) {
        int col = k->c0 + c;
        uint8_t b = bytes[col / 2];
        codes[c] = col % 2 ? b >> 4 : b & 15;
    }
    for (int g = 0; g < k->groups; g++) {
        if (exps[g] == 255)
            return loom_errf(err, "tensor '%s_scales' holds E8M0's NaN (255) at row %zu, block %d", k->name, o, g);
        scale[g] = ldexpf(1.0f, exps[g] - 127);
        zero[g] = 0;
    }
    return 0;
}

/* Tensor `<name><suffix>`: U8 [experts, rows, groups] (scales) or [experts, rows, groups, 16]
 * (blocks), experts x rows being `rows`. */
static int need_u8(weight_store *ws, const char *name, const char *suffix, int rows, int groups, bool blocks,
                   const st_tensor **out, loom_err *err) {
    char full[300];
    const char *file = ws->dir;
    snprintf(full, sizeof full, "%s%s", name, suffix);
    const st_tensor *t = *out = weights_tensor(ws, full, &file);
    if (!t) return loom_errf(err, "%s: missing tensor '%s'", ws->dir, full);
    if (t->dtype != DT_U8)
        return loom_errf(err, "%s: tensor '%s' has dtype %s, expected U8 (mxfp4)", file, full, dtype_name(t->dtype));
    if (t->ndim != (blocks ? 4 : 3) || (long long)t->shape[0] * t->shape[1] != rows || t->shape[2] != groups ||
        (blocks && t->shape[3] != MX_BLOCK / 2)) {
        char got[96];
        ckpt_shape(t, got, sizeof got);
        return loom_errf(err, "%s: tensor '%s' has shape [%s], expected [experts, rows, %d%s], %d rows in all", file,
                         full, got, groups, blocks ? ", 16" : "", rows);
    }
    return 0;
}

static bool mx_has(weight_store *ws, const quant_config *q, const char *name) {
    (void)q;
    char full[300];
    snprintf(full, sizeof full, "%s_blocks", name);
    return weights_tensor(ws, full, NULL);
}

/* whole blocks of input features; any rows */
static int mx_check(const quant_config *q, const char *name, const ckpt_slice *s, loom_err *err) {
    if (s->cols % q->group || s->c0 % q->group || s->nc % q->group)
        return loom_errf(err,
                         "%s: a rank's share of the input features, [%d, %d) of %d, is not a whole number of MXFP4 "
                         "blocks of %d",
                         name, s->c0, s->c0 + s->nc, s->cols, q->group);
    return 0;
}

static int mx_get(weight_store *ws, const quant_config *q, const char *name, const ckpt_slice *s, wmat *out,
                  loom_err *err) {
    (void)q;
    int rows = s->rows, cols = s->cols, r0 = s->r0, nr = s->nr, row_step = s->row_step, c0 = s->c0, nc = s->nc;
    int groups = cols / MX_BLOCK;
    mx_ckpt k = {NULL, NULL, name, groups, r0, row_step, c0, nc};
    if (need_u8(ws, name, "_blocks", rows, groups, true, &k.blocks, err) ||
        need_u8(ws, name, "_scales", rows, groups, false, &k.scales, err))
        return -1;
    qsource src = {.bits = 4,
                   .rows = nr,
                   .cols = nc,
                   .col0 = c0,
                   .n_groups = groups,
                   .group_size = MX_BLOCK,
                   .ctx = &k,
                   .row = mx_row,
                   .code = QCODE_E2M1};
    return qmat_build(ws, &src, out, err) ? loom_err_prefix(err, "%s", name) : 0;
}

static bool mx_head(const quant_config *q) {
    (void)q;
    return true;
}

const ckpt_reader mxfp4_reader = {.head = mx_head, .check = mx_check, .has = mx_has, .get = mx_get, .row_step = true};
