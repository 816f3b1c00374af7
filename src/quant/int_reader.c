/* The integer checkpoint formats' reader (rows of checkpoint.c's table): a rank's slice of a
 * GPTQ, AWQ or compressed-tensors linear into loom's layout (qmat_build). Each format is a
 * handful of index formulas over its tensors, written from the formats as the libraries store
 * them:
 *   GPTQ: qweight int32 [in*bits/32, out], input feature i in bits (i % pack)*bits of word
 *         i / pack; qzeros int32 [groups, out*bits/32] packed the same way along the outputs,
 *         stored minus one unless checkpoint_format is gptq_v2; scales [groups, out]; g_idx
 *         int32 [in], each input feature's group (act-order).
 *   AWQ (GEMM): qweight int32 [in, out/8] and qzeros [groups, out/8], packed along the outputs
 *         with output 8j + order[n] in nibble n, order = 0 2 4 6 1 3 5 7; scales [groups, out].
 *   compressed-tensors pack-quantized: weight_packed int32 [out, in*bits/32], element i at bit
 *         i*bits, signed values offset by 2^(bits-1); weight_scale [out, groups]; with
 *         asymmetric schemes weight_zero_point int32 [out*bits/32, groups] packed along the
 *         outputs; weight_g_idx [in]; weight_shape [2].
 *   compressed-tensors int-quantized: weight int8 [out, in], weight_scale [out, groups],
 *         weight_zero_point int8 [out, groups] when asymmetric.
 * Every format dequantizes as (q - zero) * scale, so codes and zero points are kept unsigned
 * (signed ones offset by 2^(bits-1)) and the layout is the same for all. Each rank reads only
 * its rows and columns of the packed tensors; scales and zero points are read for its rows
 * and, with act-order, for every group (its columns may belong to any). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/reader.h"
#include "util/alloc.h"
#include "util/err.h"

/* Features packed into one int32 along the input (in_pack) and the output (out_pack). */
static int in_pack(const quant_config *q) {
    return q->format == QF_GPTQ || q->format == QF_CT_PACKED ? 32 / q->bits : 1;
}
static int out_pack(const quant_config *q) {
    switch (q->format) {
    case QF_GPTQ: return 32 / q->bits;
    case QF_AWQ: return 8;
    case QF_CT_PACKED: return q->sym ? 1 : 32 / q->bits;
    default: return 1;
    }
}

static int n_groups(const quant_config *q, int cols) { return q->group ? (cols + q->group - 1) / q->group : 1; }

static int int_check(const quant_config *q, const char *name, const ckpt_slice *s, loom_err *err) {
    int rows = s->rows, cols = s->cols, r0 = s->r0, nr = s->nr, c0 = s->c0, nc = s->nc;
    int ip = in_pack(q), op = out_pack(q);
    if (q->group && cols % q->group)
        return loom_errf(err, "%s: quantization_config.group_size %d does not divide its %d input features", name,
                         q->group, cols);
    if (q->group && !q->act_order && (c0 % q->group || nc % q->group))
        return loom_errf(err,
                         "%s: a rank's share of the input features, [%d, %d) of %d, is not a whole number of "
                         "quantization groups of %d",
                         name, c0, c0 + nc, cols, q->group);
    if (c0 % ip || nc % ip)
        return loom_errf(err,
                         "%s: a rank's share of the input features, [%d, %d) of %d, splits the %d features "
                         "packed in one int32",
                         name, c0, c0 + nc, cols, ip);
    if (r0 % op || nr % op)
        return loom_errf(err,
                         "%s: a rank's share of the output features, [%d, %d) of %d, splits the %d features "
                         "packed in one int32",
                         name, r0, r0 + nr, rows, op);
    return 0;
}

/* The packed tensor a format stores in place of `<module>.weight`. */
static const char *packed_suffix(const quant_config *q) {
    switch (q->format) {
    case QF_GPTQ:
    case QF_AWQ: return "qweight";
    case QF_CT_PACKED: return "weight_packed";
    default: return "weight_scale"; /* int-quantized keeps "weight" beside its scale */
    }
}

/* A reader of one matrix's slice. */
typedef struct ckpt {
    const quant_config *q;
    int rows, cols, r0, c0, nc, groups;
    const st_tensor *w, *s, *z; /* packed weights, scales, zero points (NULL: symmetric) */
} ckpt;

enum { ANY_FLOAT = -1 };

/* Tensor `<mod>.<suffix>` with dtype dt (ANY_FLOAT: F32, F16 or BF16) and shape d0 x d1 (d1 0:
 * a vector); optional ones may be absent (NULL, no error). */
static int need(weight_store *ws, const char *mod, const char *suffix, int dt, int64_t d0, int64_t d1, bool optional,
                const st_tensor **out, loom_err *err) {
    const char *file = ws->dir;
    const st_tensor *t = *out = ckpt_part(ws, mod, suffix, &file);
    if (!t) return optional ? 0 : loom_errf(err, "%s: missing tensor '%s.%s'", ws->dir, mod, suffix);
    bool dt_ok =
        dt == ANY_FLOAT ? t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16 : (int)t->dtype == dt;
    if (!dt_ok)
        return loom_errf(err, "%s: tensor '%s.%s' has dtype %s, expected %s", file, mod, suffix, dtype_name(t->dtype),
                         dt == ANY_FLOAT ? "F32, F16 or BF16" : dtype_name((enum dtype)dt));
    if (t->ndim != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[96];
        ckpt_shape(t, got, sizeof got);
        if (d1)
            return loom_errf(err, "%s: tensor '%s.%s' has shape [%s], expected [%lld, %lld]", file, mod, suffix, got,
                             (long long)d0, (long long)d1);
        return loom_errf(err, "%s: tensor '%s.%s' has shape [%s], expected [%lld]", file, mod, suffix, got,
                         (long long)d0);
    }
    return 0;
}

static uint32_t word(const st_tensor *t, size_t i) {
    uint32_t v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

static unsigned field(uint32_t w, int index, int bits) { return (w >> (index * bits)) & ((1u << bits) - 1); }

static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7}; /* output 8j + k sits in nibble awq_nibble[k] */

/* Row r of the slice (output feature o = r0 + r): codes of the shard's columns, then every
 * group's scale and zero point. */
static int ckpt_row(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    const ckpt *k = ctx;
    const quant_config *q = k->q;
    int o = k->r0 + r, bits = q->bits, ip = in_pack(q), op = out_pack(q), rows = k->rows, cols = k->cols;
    int mid = 1 << (bits - 1);
    for (int c = 0; c < k->nc; c++) {
        int i = k->c0 + c;
        switch (q->format) {
        case QF_GPTQ: codes[c] = (uint8_t)field(word(k->w, (size_t)(i / ip) * rows + o), i % ip, bits); break;
        case QF_AWQ: codes[c] = (uint8_t)field(word(k->w, (size_t)i * (rows / 8) + o / 8), awq_nibble[o % 8], 4); break;
        case QF_CT_PACKED: codes[c] = (uint8_t)field(word(k->w, (size_t)o * (cols / ip) + i / ip), i % ip, bits); break;
        default: codes[c] = (uint8_t)(((const int8_t *)k->w->data)[(size_t)o * cols + i] + mid); break;
        }
    }
    bool by_group_rows = q->format == QF_GPTQ || q->format == QF_AWQ; /* scales [groups, out] vs [out, groups] */
    for (int g = 0; g < k->groups; g++) {
        scale[g] = ckpt_real(k->s, by_group_rows ? (size_t)g * rows + o : (size_t)o * k->groups + g);
        if (!isfinite(scale[g])) return loom_errf(err, "scale of output %d, group %d is not finite", o, g);
        if (!k->z) {
            zero[g] = (float)mid;
            continue;
        }
        switch (q->format) {
        case QF_GPTQ:
            zero[g] = (float)field(word(k->z, (size_t)g * (rows / op) + o / op), o % op, bits) + (q->gptq_v2 ? 0 : 1);
            break;
        case QF_AWQ: zero[g] = (float)field(word(k->z, (size_t)g * (rows / 8) + o / 8), awq_nibble[o % 8], 4); break;
        case QF_CT_PACKED: zero[g] = (float)field(word(k->z, (size_t)(o / op) * k->groups + g), o % op, bits); break;
        default: zero[g] = (float)(((const int8_t *)k->z->data)[(size_t)o * k->groups + g] + mid); break;
        }
    }
    return 0;
}

/* Each shard column's group, from the checkpoint's g_idx (act-order), checked. */
static int32_t *read_g_idx(const st_tensor *t, const char *mod, const char *suffix, int c0, int nc, int groups,
                           loom_err *err) {
    int32_t *g = mem_array((size_t)nc, sizeof *g, "its groups", err);
    if (!g) {
        loom_err_prefix(err, "tensor '%s.%s'", mod, suffix);
        return NULL;
    }
    for (int c = 0; c < nc; c++) {
        g[c] = (int32_t)word(t, (size_t)(c0 + c));
        if (g[c] < 0 || g[c] >= groups) {
            loom_errf(err, "tensor '%s.%s': entry %d is %d, outside the %d groups", mod, suffix, c0 + c, g[c], groups);
            free(g);
            return NULL;
        }
    }
    return g;
}

static int int_get(weight_store *ws, const quant_config *q, const char *name, const ckpt_slice *sl, wmat *out,
                   loom_err *err) {
    int rows = sl->rows, cols = sl->cols, r0 = sl->r0, nr = sl->nr, c0 = sl->c0, nc = sl->nc;
    char mod[256];
    ckpt_module_of(name, mod, sizeof mod);
    int G = n_groups(q, cols), ip = in_pack(q), op = out_pack(q);
    ckpt k = {q, rows, cols, r0, c0, nc, G, NULL, NULL, NULL};
    const st_tensor *gi = NULL, *shape = NULL;
    const char *g_name = "g_idx";
    int rc;
    switch (q->format) {
    case QF_GPTQ:
        rc = need(ws, mod, "qweight", DT_I32, cols / ip, rows, false, &k.w, err) ||
             need(ws, mod, "qzeros", DT_I32, G, rows / op, false, &k.z, err) ||
             need(ws, mod, "scales", ANY_FLOAT, G, rows, false, &k.s, err) ||
             need(ws, mod, g_name, DT_I32, cols, 0, !q->act_order, &gi, err);
        if (!q->act_order) gi = NULL; /* trivial when groups follow the columns */
        break;
    case QF_AWQ:
        rc = need(ws, mod, "qweight", DT_I32, cols, rows / 8, false, &k.w, err) ||
             need(ws, mod, "qzeros", DT_I32, G, rows / 8, false, &k.z, err) ||
             need(ws, mod, "scales", ANY_FLOAT, G, rows, false, &k.s, err);
        break;
    case QF_CT_PACKED:
        g_name = "weight_g_idx";
        rc = need(ws, mod, "weight_packed", DT_I32, rows, cols / ip, false, &k.w, err) ||
             need(ws, mod, "weight_scale", ANY_FLOAT, rows, G, false, &k.s, err) ||
             (!q->sym && need(ws, mod, "weight_zero_point", DT_I32, rows / op, G, false, &k.z, err)) ||
             need(ws, mod, "weight_shape", DT_I64, 2, 0, true, &shape, err) ||
             need(ws, mod, g_name, DT_I32, cols, 0, !q->act_order, &gi, err);
        break;
    default:
        g_name = "weight_g_idx";
        rc = need(ws, mod, "weight", DT_I8, rows, cols, false, &k.w, err) ||
             need(ws, mod, "weight_scale", ANY_FLOAT, rows, G, false, &k.s, err) ||
             (!q->sym && need(ws, mod, "weight_zero_point", DT_I8, rows, G, false, &k.z, err)) ||
             need(ws, mod, g_name, DT_I32, cols, 0, !q->act_order, &gi, err);
        break;
    }
    if (rc) return -1;
    if (shape) {
        int64_t s[2];
        memcpy(s, shape->data, sizeof s);
        if (s[0] != rows || s[1] != cols)
            return loom_errf(err, "tensor '%s.weight_shape' says [%lld, %lld], expected [%d, %d]", mod, (long long)s[0],
                             (long long)s[1], rows, cols);
    }
    int32_t *group_of = gi ? read_g_idx(gi, mod, g_name, c0, nc, G, err) : NULL;
    if (gi && !group_of) return -1;
    qsource src = {.bits = q->bits,
                   .rows = nr,
                   .cols = nc,
                   .col0 = c0,
                   .n_groups = G,
                   .group_size = q->group ? q->group : cols,
                   .group_of = group_of,
                   .ctx = &k,
                   .row = ckpt_row};
    k.r0 = r0;
    rc = qmat_build(ws, &src, out, err);
    free(group_of);
    return rc ? loom_err_prefix(err, "%s", mod) : 0;
}

/* GPTQ says; AWQ never quantizes the head (vLLM's lm_head takes no quantization from it);
 * compressed-tensors does unless its ignore list names it */
static bool int_head(const quant_config *q) { return q->format == QF_GPTQ ? q->lm_head : q->format != QF_AWQ; }

static bool int_has(weight_store *ws, const quant_config *q, const char *name) {
    char mod[256];
    ckpt_module_of(name, mod, sizeof mod);
    return ckpt_part(ws, mod, packed_suffix(q), NULL);
}

const ckpt_reader int_reader = {.head = int_head, .check = int_check, .has = int_has, .get = int_get};
