/* The int8 panel on AMX tiles (cpu.h's panel_q8), built into the avx512amx variant alone, with
 * its flags: one tile instruction multiplies 16 input rows by 16 weight rows over a 32-column
 * block, where the AVX-512 tile (variant.c's tile_q8) needs 64 vector products. Written here
 * because oneDNN's u8s8 matmul sums over the whole row before it scales: the int8 order every
 * variant keeps (cpu.h) scales each 32-column block's exact sum by its own activation scale, so
 * a tile instruction covers one block, its int32 sums leave the tile, and the fp32 steps follow
 * tile_q8's to the operation. Integer sums are exact, so the bits are the same as tile_q8's.
 * GGUF blocks take the same tiles a sub-block at a time (amx_panel_gguf), in panel_gguf_q8's
 * order, which variant.c's AVX-512 VNNI panel keeps too. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu/amx.h"
#include "tensor/tensor.h"

/* The tiles: C0-C3 a ring of four blocks' int32 sums (block b in C(b % 4)), each of 16 input
 * rows against 16 weight rows; A0, A1 and B0, B1 the blocks' codes, the inputs' (16 rows of 32
 * bytes) and the weights' (four columns of a row in each dword, the layout the instruction
 * takes), alternating. Numerals, not an enum: the intrinsics paste them into the instruction's
 * register names. */
#define C0      0
#define C1      1
#define C2      2
#define C3      3
#define A0      4
#define A1      5
#define B0      6
#define B1      7
#define PANEL_W PANEL_Q8_W /* a C tile's int32 columns */

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* The tiles for blocks of `width` columns (a multiple of 4): 32 for loom's formats, a GGUF
 * type's sub-block (16 or 32) for its panel. */
static void tiles_configure(int width) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = C0; t <= C3; t++) c.rows[t] = PANEL_Q8_ROWS, c.colsb[t] = PANEL_W * 4;
    for (int t = A0; t <= A1; t++) c.rows[t] = PANEL_Q8_ROWS, c.colsb[t] = (uint16_t)width;
    for (int t = B0; t <= B1; t++) c.rows[t] = (uint8_t)(width / 4), c.colsb[t] = PANEL_W * 4;
    /* GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, which lets it drop the
     * stores above; the whole struct as the operand keeps them */
    __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

/* The panel as the tiles take it: the 16 weight rows (ld bytes apart) as B tiles, one per
 * block, dword t of tile row n holding row n's columns 4t..4t+3 (a 4-bit block's byte i holds
 * column i in its low nibble and column 16 + i in its high one, so its dword t gives tile rows t
 * and t + 4); then per group the 16 rows' scales and scale times zero point, as tile_q8 forms
 * them (their 8-bit codes need no offset here: the instruction takes them unsigned). */
static void pack_panel(const uint8_t *w, size_t ld, const qlayout *q, const float *sz, uint8_t *pack) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i rows = _mm512_mullo_epi32(_mm512_set1_epi32((int)ld), lane);
    const __m512i nib = _mm512_set1_epi8(15);
    const size_t block_bytes = (size_t)q->bits * QBLOCK / 8;
    for (int b = 0; b < q->kp / QBLOCK; b++, pack += QBLOCK * PANEL_W) {
        const uint8_t *blk = w + (size_t)b * block_bytes;
        for (int t = 0; t < (int)block_bytes / 4; t++) {
            __m512i d = _mm512_i32gather_epi32(rows, blk + 4 * t, 1);
            if (q->bits == 8) {
                _mm512_storeu_si512(pack + t * 64, d);
                continue;
            }
            _mm512_storeu_si512(pack + t * 64, _mm512_and_si512(d, nib));
            _mm512_storeu_si512(pack + (t + 4) * 64, _mm512_and_si512(_mm512_srli_epi16(d, 4), nib));
        }
    }
    const __m512i at = _mm512_mullo_epi32(_mm512_set1_epi32(2 * q->n_groups), lane);
    float *scales = (float *)pack;
    for (int g = 0; g < q->n_groups; g++, scales += 2 * PANEL_W) {
        __m512 s = _mm512_i32gather_ps(at, sz + 2 * g, 4), z = _mm512_i32gather_ps(at, sz + 2 * g + 1, 4);
        _mm512_storeu_ps(scales, s);
        _mm512_storeu_ps(scales + PANEL_W, _mm512_mul_ps(s, z));
    }
}

/* Block b (`width` columns) of 16 input rows (x0, x_stride bytes apart) against the panel's:
 * the block's exact sums, through tile c, into cs; the weights' codes unsigned (loom's formats)
 * or signed (GGUF's). */
#define BLOCK_SUMS(c, a, bt, b, cs)                                                                                    \
    do {                                                                                                               \
        _tile_zero(c);                                                                                                 \
        _tile_loadd(a, x0 + (size_t)(b)*width, x_stride);                                                              \
        _tile_loadd(bt, pack + (size_t)(b)*width * PANEL_W, PANEL_W * 4);                                              \
        if (signed_codes) _tile_dpbssd(c, a, bt);                                                                      \
        else _tile_dpbsud(c, a, bt);                                                                                   \
        _tile_stored(c, cs, PANEL_W * 4);                                                                              \
    } while (0)

/* ga[r] += block b's sums of row r (cs[r], one lane a weight row) times its activation scale */
static inline __attribute__((always_inline)) void add_block(__m512 ga[PANEL_Q8_ROWS], int32_t cs[][PANEL_W],
                                                            const q8row *x, size_t b) {
#pragma GCC unroll 16
    for (int r = 0; r < PANEL_Q8_ROWS; r++)
        ga[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs[r])), _mm512_set1_ps(x[r].d[b]), ga[r]);
}

/* Block b's sums into tile b % 4 and its buffer, the tile numbers being constants. */
static inline __attribute__((always_inline)) void issue_block(const int8_t *x0, size_t x_stride, const uint8_t *pack,
                                                              int width, bool signed_codes, int b,
                                                              int32_t cs[][PANEL_Q8_ROWS][PANEL_W]) {
    switch (b & 3) {
    case 0: BLOCK_SUMS(C0, A0, B0, b, cs[0]); break;
    case 1: BLOCK_SUMS(C1, A1, B1, b, cs[1]); break;
    case 2: BLOCK_SUMS(C2, A0, B0, b, cs[2]); break;
    default: BLOCK_SUMS(C3, A1, B1, b, cs[3]); break;
    }
}

/* Group g's sums (ga) into the rows' totals, as tile_q8 finishes a group: acc += ga * scale,
 * zt += the row's group sum * scale * zero point; ga starts again. */
static inline __attribute__((always_inline)) void finish_group(__m512 ga[PANEL_Q8_ROWS], const q8row *x,
                                                               const float *scales, int g, float acc[][PANEL_W],
                                                               float zt[][PANEL_W]) {
    __m512 sv = _mm512_loadu_ps(scales + (size_t)g * 2 * PANEL_W),
           szv = _mm512_loadu_ps(scales + (size_t)g * 2 * PANEL_W + PANEL_W);
#pragma GCC unroll 16
    for (int r = 0; r < PANEL_Q8_ROWS; r++) {
        _mm512_store_ps(acc[r], _mm512_fmadd_ps(ga[r], sv, _mm512_load_ps(acc[r])));
        _mm512_store_ps(zt[r], _mm512_fmadd_ps(szv, _mm512_set1_ps(x[r].gsum[g]), _mm512_load_ps(zt[r])));
        ga[r] = _mm512_setzero_ps();
    }
}

/* 16 input rows from x against the packed panel: tile_q8_rows's steps, with the 16 weight rows
 * in the lanes. The tiles run LEAD blocks ahead of the vector units that scale their sums: a
 * block's path through the tiles and back to memory takes about as long as the vector work of
 * a few, and the pipeline crosses group boundaries. Every group is finished in order, those
 * without a block of a shard's columns too, as tile_q8 does. */
#define LEAD 3
static void rows16(const q8row *x, size_t x_stride, const uint8_t *pack, const qlayout *q, float *y, size_t ldy) {
    _Alignas(64) int32_t cs[4][PANEL_Q8_ROWS][PANEL_W];
    _Alignas(64) float acc[PANEL_Q8_ROWS][PANEL_W] = {{0}}, zt[PANEL_Q8_ROWS][PANEL_W] = {{0}};
    const int8_t *x0 = x[0].q;
    const float *scales = (const float *)(pack + (size_t)q->kp * PANEL_W);
    const int nb = q->kp / QBLOCK;
    for (int b = 0; b < LEAD && b < nb; b++) issue_block(x0, x_stride, pack, QBLOCK, false, b, cs);
    __m512 ga[PANEL_Q8_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < PANEL_Q8_ROWS; r++) ga[r] = _mm512_setzero_ps();
    int g = 0;
    for (int b = 0; b < nb; b++) {
        if (b + LEAD < nb) issue_block(x0, x_stride, pack, QBLOCK, false, b + LEAD, cs);
        for (; g < q->n_groups && q->group_end[g] / QBLOCK <= b; g++) finish_group(ga, x, scales, g, acc, zt);
        add_block(ga, cs[b & 3], x, (size_t)b);
    }
    for (; g < q->n_groups; g++) finish_group(ga, x, scales, g, acc, zt);
    for (int r = 0; r < PANEL_Q8_ROWS; r++)
        _mm512_storeu_ps(y + (size_t)r * ldy, _mm512_sub_ps(_mm512_load_ps(acc[r]), _mm512_load_ps(zt[r])));
}

void amx_panel_q8(const q8row *x, size_t x_stride, int nr, const uint8_t *w, size_t ld, const qlayout *q,
                  const float *sz, uint8_t *pack, float *y, size_t ldy) {
    pack_panel(w, ld, q, sz, pack);
    tiles_configure(QBLOCK);
    for (int r = 0; r + PANEL_Q8_ROWS <= nr; r += PANEL_Q8_ROWS)
        rows16(x + r, x_stride, pack, q, y + (size_t)r * ldy, ldy);
    _tile_release(); /* a thread holding tile state costs every context switch 8 KiB more */
}

/* 16 input rows (codes from x0, x_stride bytes apart; scales and sums from x) against the GGUF
 * panel, in panel_gguf_q8's order, into y's first `rows` rows and nw columns; width and mins
 * constant once inlined (gguf_strip: 1B shape, Q6_K, prefill 512, 242 -> 274 tok/s). Two
 * 16-column sub-blocks share their block's activation scale, which multiplies their sum once
 * (274 -> 289). */
static inline __attribute__((always_inline)) void gguf_rows16(const int8_t *x0, size_t x_stride, const q8row *x,
                                                              const uint8_t *pack, const float *dl, const float *ml,
                                                              int kp, int width, bool mins, float *y, size_t ldy,
                                                              int rows, int nw) {
    _Alignas(64) int32_t cs[4][PANEL_Q8_ROWS][PANEL_W];
    const int nb = kp / width, per = QACT / width; /* sub-blocks; of them a scale block */
    const int lead = per == 2 ? 2 : LEAD;          /* a pair's two in flight, the next pair's issued */
    for (int b = 0; b < lead && b < nb; b++) issue_block(x0, x_stride, pack, width, true, b, cs);
    __m512 acc[PANEL_Q8_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < PANEL_Q8_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b += per) {
        for (int h = 0; h < per; h++)
            if (b + h + lead < nb) issue_block(x0, x_stride, pack, width, true, b + h + lead, cs);
        __m512 dv = _mm512_loadu_ps(dl + (size_t)b * PANEL_W);
        if (per == 2) {
            __m512 dv1 = _mm512_loadu_ps(dl + (size_t)(b + 1) * PANEL_W);
#pragma GCC unroll 16
            for (int r = 0; r < PANEL_Q8_ROWS; r++) {
                __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs[b & 3][r])), dv);
                p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs[(b + 1) & 3][r])), dv1, p);
                acc[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(x[r].d[b / 2]), acc[r]);
            }
        } else {
#pragma GCC unroll 16
            for (int r = 0; r < PANEL_Q8_ROWS; r++) {
                __m512 f = _mm512_mul_ps(dv, _mm512_set1_ps(x[r].d[b]));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs[b & 3][r])), f, acc[r]);
            }
        }
        for (int h = 0; mins && h < per; h++) {
            __m512 mv = _mm512_loadu_ps(ml + (size_t)(b + h) * PANEL_W);
#pragma GCC unroll 16
            for (int r = 0; r < PANEL_Q8_ROWS; r++)
                acc[r] = _mm512_fnmadd_ps(mv, _mm512_set1_ps(x[r].gsum[b + h]), acc[r]);
        }
    }
    __mmask16 cols = (__mmask16)((1u << nw) - 1);
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(y + (size_t)r * ldy, cols, acc[r]);
}

static void gguf_strip(const int8_t *x0, size_t x_stride, const q8row *x, const uint8_t *pack, const float *dl,
                       const float *ml, int kp, int width, bool mins, float *y, size_t ldy, int rows, int nw) {
    if (width == 16 && mins) gguf_rows16(x0, x_stride, x, pack, dl, ml, kp, 16, true, y, ldy, rows, nw);
    else if (width == 16) gguf_rows16(x0, x_stride, x, pack, dl, ml, kp, 16, false, y, ldy, rows, nw);
    else if (mins) gguf_rows16(x0, x_stride, x, pack, dl, ml, kp, QACT, true, y, ldy, rows, nw);
    else gguf_rows16(x0, x_stride, x, pack, dl, ml, kp, QACT, false, y, ldy, rows, nw);
}

void amx_panel_gguf(const q8row *x, size_t x_stride, int nr, uint8_t *pack, const float *dl, const float *ml, int kp,
                    int width, bool mins, float *y, size_t ldy, int nw) {
    uint8_t *tail = pack + (size_t)kp * PANEL_W; /* a partial step's rows, the last repeated */
    tiles_configure(width);
    int r = 0;
    for (; r + PANEL_Q8_ROWS <= nr; r += PANEL_Q8_ROWS)
        gguf_strip(x[r].q, x_stride, x + r, pack, dl, ml, kp, width, mins, y + (size_t)r * ldy, ldy, PANEL_Q8_ROWS, nw);
    if (r < nr) {
        q8row xt[PANEL_Q8_ROWS];
        for (int i = 0; i < PANEL_Q8_ROWS; i++) {
            xt[i] = x[r + i < nr ? r + i : nr - 1];
            memcpy(tail + (size_t)i * kp, xt[i].q, (size_t)kp);
        }
        gguf_strip((const int8_t *)tail, (size_t)kp, xt, pack, dl, ml, kp, width, mins, y + (size_t)r * ldy, ldy,
                   nr - r, nw);
    }
    _tile_release();
}
