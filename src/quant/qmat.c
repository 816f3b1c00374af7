/* Repacking into loom's quantized layout (quant.h): orders a shard's columns by group, pads
 * each group to whole blocks, and packs every row's codes with its scales and zero points.
 * Every format's reader ends here, so the kernels see one layout. FP4 codes (MXFP4 checkpoints,
 * -q mxfp4) are the exception: they become ggml's MXFP4 blocks (tensor/gguf_blocks.h), the
 * E8M0 byte before each block's 16 bytes of codes, in the nibble order loom packs 4-bit codes
 * in anyway, so that GGUF's kernels multiply them by int8 activations or decode them exactly,
 * as they do llama.cpp's files. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "tensor/fp4.h"
#include "tensor/gguf_blocks.h"
#include "util/alloc.h"
#include "util/err.h"

typedef struct colkey {
    int32_t group, col;
} colkey;

static int by_group(const void *a, const void *b) {
    const colkey *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

/* Packs one row's codes (in packed-column order) into bytes: 4-bit ones a block at a time, code j
 * in byte j's low nibble and j + 16 in its high one; MXFP4 rows with each block's E8M0 byte
 * first (exps, one a block). */
static void pack_row(int bits, int kp, const uint8_t *codes, const uint8_t *exps, uint8_t *dst) {
    if (bits == 8) {
        memcpy(dst, codes, (size_t)kp);
        return;
    }
    for (int b = 0; b < kp; b += QBLOCK) {
        if (exps) *dst++ = exps[b / QBLOCK];
        for (int j = 0; j < QBLOCK / 2; j++) *dst++ = (uint8_t)(codes[b + j] | codes[b + QBLOCK / 2 + j] << 4);
    }
}

/* A block's FP4 scale as its E8M0 byte (2^(e - 127), e in [0, 254]: what the readers give), or -1. */
static int e8m0_of(float scale) {
    int e = scale > 0 ? ilogbf(scale) + 127 : -1;
    return e < 0 || e > 254 || e8m0_to_f32((uint8_t)e) != scale ? -1 : e;
}

int qmat_build(weight_store *ws, const qsource *src, wmat *out, loom_err *err) {
    int cols = src->cols, rows = src->rows;
    colkey *keys = mem_array((size_t)cols, sizeof *keys, "a quantized matrix's column order", err);
    if (!keys) return -1;
    for (int c = 0; c < cols; c++) {
        int g = src->group_of ? src->group_of[c] : (src->col0 + c) / src->group_size;
        if (g < 0 || g >= src->n_groups) {
            free(keys);
            return loom_errf(err, "column %d belongs to group %d, outside the %d groups", src->col0 + c, g,
                             src->n_groups);
        }
        keys[c] = (colkey){g, c};
    }
    qsort(keys, (size_t)cols, sizeof *keys, by_group);

    /* the groups present, in order, each padded to whole blocks */
    int n_groups = 0, kp = 0, rc = -1, threads = omp_get_max_threads();
    const char *what = "a quantized matrix";
    int32_t *gid = mem_array((size_t)cols, sizeof *gid, what, err), *gend = NULL, *group_end, *col_of;
    uint8_t *codes = NULL, *data;
    float *scale = NULL, *sz = NULL;
    bool fp4 = src->code == QCODE_E2M1; /* scales powers of two, no zero point: ggml's MXFP4 blocks */
    qlayout *q;
    if (!gid || !(gend = mem_array((size_t)cols, sizeof *gend, what, err))) goto done;
    for (int c = 0; c < cols; c++) {
        if (c == 0 || keys[c].group != keys[c - 1].group) {
            if (n_groups) kp = gend[n_groups - 1] = (kp + QBLOCK - 1) / QBLOCK * QBLOCK;
            gid[n_groups++] = keys[c].group;
        }
        kp++;
    }
    kp = gend[n_groups - 1] = (kp + QBLOCK - 1) / QBLOCK * QBLOCK;

    if (fp4 && (kp != cols || src->col0 % QBLOCK || src->group_of || src->group_size != QBLOCK)) {
        loom_errf(err, "MXFP4: columns [%d, %d) are not whole blocks of %d", src->col0, src->col0 + cols, QBLOCK);
        goto done;
    }
    size_t row_bytes = fp4 ? (size_t)kp / QBLOCK * gtype_table[GT_MXFP4].bytes : (size_t)kp * src->bits / 8;
    if (!(q = weights_buffer(ws, sizeof *q, what, err)) ||
        !(group_end = weights_buffer(ws, (size_t)n_groups * sizeof *group_end, what, err)) ||
        !(col_of = weights_buffer(ws, (size_t)kp * sizeof *col_of, what, err)) ||
        (!fp4 && !(sz = weights_buffer(ws, (size_t)rows * n_groups * 2 * sizeof *sz, what, err))) ||
        !(data = weights_buffer(ws, (size_t)rows * row_bytes, what, err)) ||
        !(codes = mem_array((size_t)threads, (size_t)cols + kp + kp / QBLOCK, "quantization scratch", err)) ||
        !(scale = mem_array((size_t)threads * 2 * src->n_groups, sizeof *scale, "quantization scratch", err)))
        goto done;
    memcpy(group_end, gend, (size_t)n_groups * sizeof *group_end);
    bool identity = kp == cols;
    for (int g = 0, c = 0, p = 0; g < n_groups; g++) {
        for (; c < cols && keys[c].group == gid[g]; c++, p++) identity &= (col_of[p] = keys[c].col) == p;
        for (; p < group_end[g]; p++) col_of[p] = -1;
    }
    *q = fp4 ? (qlayout){.kp = kp, .code = QCODE_GGUF, .gtype = GT_MXFP4}
             : (qlayout){.bits = src->bits,
                         .kp = kp,
                         .n_groups = n_groups,
                         .group_end = group_end,
                         .col_of = identity ? NULL : col_of,
                         .sz = sz,
                         .code = src->code,
                         .in_scale = src->in_scale,
                         .in_group = src->in_group};
    *out = (wmat){.dt = DT_U8, .rows = rows, .cols = cols, .ld = row_bytes, .data = data, .q = q};

    rc = 0;
    for (int r0 = 0; r0 < rows && !rc; r0 += QCHUNK) {
        int n = rows - r0 < QCHUNK ? rows - r0 : QCHUNK;
        if (src->chunk && (rc = src->chunk(src->ctx, r0, n, err))) break;
#pragma omp parallel for schedule(dynamic, 8)
        for (int r = r0; r < r0 + n; r++) {
            int t = omp_get_thread_num();
            uint8_t *code = codes + (size_t)t * (cols + kp + kp / QBLOCK), *packed = code + cols;
            float *s = scale + (size_t)t * 2 * src->n_groups, *z = s + src->n_groups;
            loom_err mine = {{0}};
            if (src->row(src->ctx, r, code, s, z, &mine)) {
#pragma omp critical
                if (!rc) rc = -1, *err = mine;
                continue;
            }
            for (int p = 0; p < kp; p++) packed[p] = col_of[p] >= 0 ? code[col_of[p]] : 0;
            uint8_t *exps = fp4 ? packed + kp : NULL; /* each block's E8M0 byte */
            for (int g = 0; g < n_groups && fp4; g++) {
                int e = e8m0_of(s[gid[g]]);
                if (e < 0) {
                    loom_errf(&mine, "row %d: FP4 scale %g is not a power of two in E8M0's range", r, s[gid[g]]);
#pragma omp critical
                    if (!rc) rc = -1, *err = mine;
                    exps = NULL;
                    break;
                }
                exps[g] = (uint8_t)e;
            }
            if (fp4 && !exps) continue;
            pack_row(src->bits, kp, packed, exps, data + (size_t)r * row_bytes);
            for (int g = 0; g < n_groups && !fp4; g++) {
                sz[((size_t)r * n_groups + g) * 2] = s[gid[g]];
                sz[((size_t)r * n_groups + g) * 2 + 1] = z[gid[g]];
            }
        }
    }
done:
    free(codes);
    free(scale);
    free(keys);
    free(gid);
    free(gend);
    return rc;
}
