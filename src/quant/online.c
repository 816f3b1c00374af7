/* Quantization at load (--quantization int8|int4|fp8), of a float checkpoint or of dummy
 * weights, as vLLM's online fp8 lets any checkpoint run in less memory. int8 is symmetric
 * (zero point 128, scale absmax / 127); int4 is asymmetric over a range that includes 0 (scale
 * (max - min) / 15, zero point round(-min / scale)), as GPTQ's asymmetric mode and Q4_1 are:
 * one code more of range matters at 4 bits. fp8 is E4M3 with vLLM's scale, absmax / 448, taken
 * per output channel rather than vLLM's per tensor: a tensor's scale needs a pass over the
 * whole matrix before any row can be coded, where each rank reads only its rows, and a scale
 * per row is FP8_DYNAMIC's (llm-compressor's) and never coarser. Round to nearest, no error
 * correction (that is what GPTQ and AWQ checkpoints are for). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "tensor/fp4.h"
#include "tensor/fp8.h"
#include "util/alloc.h"
#include "util/err.h"

int quant_scheme_parse(quant_scheme *s, const char *name, int group, bool head, loom_err *err) {
    *s = (quant_scheme){0};
    if (!name || !strcmp(name, "none")) {
        if (group || head)
            return loom_errf(err, "%s needs --quantization", group ? "--quant-group-size" : "--quantize-lm-head");
        return 0;
    }
    if (!strcmp(name, "int8")) *s = (quant_scheme){8, group, head, QCODE_UINT, 0, 0, false};
    else if (!strcmp(name, "int4")) *s = (quant_scheme){4, group ? group : 128, head, QCODE_UINT, 0, 0, false};
    else if (!strcmp(name, "fp8")) *s = (quant_scheme){8, group, head, QCODE_E4M3, 0, 0, false};
    else if (!strcmp(name, "mxfp4")) *s = (quant_scheme){4, 32, head, QCODE_E2M1, 0, 0, false};
    else return loom_errf(err, "--quantization: unknown '%s' (none, int8, int4, fp8, mxfp4)", name);
    if (s->code == QCODE_E2M1 && group && group != 32)
        return loom_errf(err, "--quant-group-size: mxfp4's blocks are 32 columns (got %d)", group);
    if (group < 0 || (group && group % QBLOCK))
        return loom_errf(err, "--quant-group-size: %d is not a positive multiple of %d", group, QBLOCK);
    return 0;
}

typedef struct online_src {
    weight_store *ws;
    const char *name;
    int ndim;
    const int *shape;
    int cols, r0, c0, nc, group, bits;
    float init;
    float *buf; /* QCHUNK whole rows */
    int buf_r0;
    enum qcode code;
} online_src;

static int online_chunk(void *ctx, int r0, int n, loom_err *err) {
    online_src *o = ctx;
    o->buf_r0 = r0;
    return weights_read_f32(o->ws, o->name, o->ndim, o->shape, o->cols, o->r0 + r0, n, 0, o->cols, o->init, o->buf,
                            err);
}

/* Codes for the whole row (every group's scale needs its whole group), then this shard's. */
static int online_row(void *ctx, int r, uint8_t *codes, float *scale, float *zero, loom_err *err) {
    const online_src *o = ctx;
    const float *x = o->buf + (size_t)(r - o->buf_r0) * o->cols;
    int bits = o->bits;
    for (int g = 0; g * o->group < o->cols; g++) {
        const float *v = x + (size_t)g * o->group;
        int n = o->cols - g * o->group < o->group ? o->cols - g * o->group : o->group; /* FP8's last may be short */
        float lo = 0, hi = 0, s, z;
        for (int c = 0; c < n; c++) {
            if (!isfinite(v[c]))
                return loom_errf(err, "%s: tensor '%s' has a non-finite value at [%d, %d]; it cannot be quantized",
                                 o->ws->dir, o->name, o->r0 + r, g * o->group + c);
            lo = fminf(lo, v[c]), hi = fmaxf(hi, v[c]);
        }
        if (o->code == QCODE_E2M1) { /* OCP MX: 2^(floor(log2(amax)) - 2), the largest code's exponent */
            float amax = fmaxf(hi, -lo);
            s = amax > 0 ? ldexpf(1.0f, ilogbf(amax) - 2) : 1, z = 0;
        } else if (o->code) { /* FP8: vLLM's amax / 448, no zero point */
            s = fmaxf(hi, -lo) / FP8_E4M3_MAX, z = 0;
        } else if (bits == 8) {
            s = fmaxf(hi, -lo) / 127, z = 128;
        } else {
            s = (hi - lo) / 15;
            z = s > 0 ? fminf(fmaxf(roundf(-lo / s), 0), 15) : 0;
        }
        if (!(s > 0)) s = 1; /* an all-zero group: every code is the zero point (FP8: zero) */
        scale[g] = s, zero[g] = z;
        int qmax = (1 << bits) - 1;
        for (int c = 0; c < n; c++) {
            int gc = g * o->group + c - o->c0;
            if (gc >= 0 && gc < o->nc)
                codes[gc] = o->code == QCODE_E2M1 ? f32_to_e2m1(v[c] / s)
                            : o->code             ? f32_to_e4m3(v[c] / s)
                                                  : (uint8_t)fminf(fmaxf(roundf(v[c] / s) + z, 0), (float)qmax);
        }
    }
    return 0;
}

int quant_online(weight_store *ws, const quant_scheme *s, const char *name, int ndim, const int *shape, int cols,
                 int r0, int nr, int c0, int nc, float init, wmat *out, loom_err *err) {
    int group = s->group ? s->group : cols;
    if (quant_check_split(s, name, cols, c0, nc, err)) return -1;
    if (weights_made_find(ws, name, r0, nr, c0, nc, true, DT_F32, out)) return 0;
    online_src o = {ws,      name,   ndim,
                    shape,   cols,   r0,
                    c0,      nc,     group,
                    s->bits, init,   mem_array((size_t)QCHUNK * cols, sizeof(float), "the rows being quantized", err),
                    0,       s->code};
    if (!o.buf) return loom_err_prefix(err, "%s", name);
    qsource src = {.bits = s->bits,
                   .rows = nr,
                   .cols = nc,
                   .col0 = c0,
                   .n_groups = (cols + group - 1) / group,
                   .group_size = group,
                   .ctx = &o,
                   .chunk = online_chunk,
                   .row = online_row,
                   .code = s->code,
                   .in_scale = s->in_scale,
                   .in_group = s->in_group};
    int rc = qmat_build(ws, &src, out, err);
    free(o.buf);
    if (rc) return rc;
    return weights_made_keep(ws, name, r0, nr, c0, nc, out, err);
}

int quant_check_split(const quant_scheme *s, const char *name, int cols, int c0, int nc, loom_err *err) {
    if (!s->group || (s->code && s->code != QCODE_E2M1)) return 0; /* per channel, or FP8 (fp8_reader.c): any split */
    if (cols % s->group)
        return loom_errf(err, "%s: %d input features are not a whole number of quantization groups of %d", name, cols,
                         s->group);
    if (c0 % s->group || nc % s->group)
        return loom_errf(err,
                         "%s: a rank's share of the input features, [%d, %d) of %d, is not a whole number of "
                         "quantization groups of %d",
                         name, c0, c0 + nc, cols, s->group);
    return 0;
}
