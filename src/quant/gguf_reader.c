/* The GGUF reader (a row of checkpoint.c's table; quant format QF_GGUF): a rank's slice of a
 * linear stored in one of llama.cpp's block types is the file's own bytes, mapped, never
 * repacked. Rows are independent, so any rows can be taken; a slice of the input features
 * (row-parallel) must keep whole decoding units: a k-quant's sub-blocks of 16 or 32 (a slice may
 * start or end inside a super-block, whose header both sides read), the other types' blocks. A
 * shape that cuts one (2880 features over 4 ranks in Q4_K: 720 is not a multiple of 32) is
 * refused at plan time, naming the tensor, its type and the unit. The kernels multiply the
 * blocks' codes by int8 activations (cpu.h's dot_gguf_q8) or decode them exactly (--dtype
 * float32; runtime/bind.c chooses). Tensors the file stores as F32, F16 or BF16 are not this
 * reader's: `has` says no, and they load as any float checkpoint's. */
#include <stdio.h>

#include "quant/reader.h"
#include "tensor/gguf_blocks.h"
#include "util/err.h"

static bool gg_head(const quant_config *q) {
    (void)q;
    return true;
}

static bool gg_has(weight_store *ws, const quant_config *q, const char *name) {
    (void)q;
    const st_tensor *t = weights_tensor(ws, name, NULL);
    return t && t->gtype;
}

/* The tensor's own type's decoding unit (gtype_split: a k-quant's sub-block, else the block) must
 * not be cut (checked at plan time, and by checkpoint.c before every gg_get). */
static int gg_check(const quant_config *q, const char *name, const ckpt_slice *s, loom_err *err) {
    if (s->row_step > 1) return loom_errf(err, "%s: interleaved rows are not read from GGUF files", name);
    int type = q->gguf_type ? q->gguf_type(q->store, name) : 0;
    int unit = type ? gtype_split(type) : 1;
    if (unit > 1 && (s->c0 % unit || s->nc % unit))
        return loom_errf(err,
                         "%s: a rank's share of the input features, [%d, %d) of %d, cuts a GGUF block: the tensor is "
                         "%s, which splits at multiples of %d weights; use fewer ranks for this model",
                         name, s->c0, s->c0 + s->nc, s->cols, gtype_table[type].name, unit);
    return 0;
}

static int gg_get(weight_store *ws, const quant_config *q, const char *name, const ckpt_slice *s, wmat *out,
                  loom_err *err) {
    (void)q;
    const char *file = ws->dir;
    const st_tensor *t = weights_tensor(ws, name, &file);
    if (!t || !t->gtype) return loom_errf(err, "%s: missing block-quantized tensor '%s'", ws->dir, name);
    const gtype_info *g = &gtype_table[t->gtype];
    /* a stack of experts, [E, out, in], is read as its E x out rows */
    long long rows = t->ndim == 3 ? (long long)t->shape[0] * t->shape[1] : t->shape[0];
    if (t->ndim < 2 || t->ndim > 3 || rows != s->rows || t->shape[t->ndim - 1] != s->cols)
        return loom_errf(err, "%s: tensor '%s' (%s) has %lld rows of %lld, expected %d of %d", file, name, g->name,
                         rows, (long long)t->shape[t->ndim - 1], s->rows, s->cols);
    qlayout *ql = weights_buffer(ws, sizeof *ql, "a GGUF tensor's layout", err);
    if (!ql) return -1;
    size_t row_bytes = (size_t)s->cols / g->block * g->bytes;
    int g0 = s->c0 % g->block; /* a share that starts inside a super-block: its sub-blocks from there */
    *ql = (qlayout){.bits = 0, .kp = s->nc, .code = QCODE_GGUF, .gtype = t->gtype, .g0 = g0};
    *out = (wmat){.dt = DT_U8,
                  .rows = s->nr,
                  .cols = s->nc,
                  .ld = row_bytes,
                  .data = (const uint8_t *)t->data + (size_t)s->r0 * row_bytes + (size_t)s->c0 / g->block * g->bytes,
                  .q = ql};
    ws->bytes_mapped_used += (size_t)s->nr * ((size_t)(g0 + s->nc + g->block - 1) / g->block * g->bytes);
    return 0;
}

const ckpt_reader gguf_reader = {.head = gg_head, .check = gg_check, .has = gg_has, .get = gg_get};
