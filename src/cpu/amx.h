/* The AMX int8 panels (amx.c): loom's formats', which the avx512amx variant's table holds as
 * panel_q8, and the tiles of its panel_gguf_q8, whose panel variant.c decodes and lays out: a
 * GGUF panel's 16 rows of kp codes as the tiles take them (pack, followed by PANEL_Q8_ROWS * kp
 * bytes of scratch), and per sub-block of `width` columns u the 16 rows' factors
 * dl[u * 16 + n] and ml[u * 16 + n] (mins: the type has them). */
#ifndef LOOM_CPU_AMX_H
#define LOOM_CPU_AMX_H
#include <stdbool.h>

#include "cpu/cpu.h"

void amx_panel_q8(const q8row *x, size_t x_stride, int nr, const uint8_t *w, size_t ld, const struct qlayout *q,
                  const float *sz, uint8_t *pack, float *y, size_t ldy);

void amx_panel_gguf(const q8row *x, size_t x_stride, int nr, uint8_t *pack, const float *dl, const float *ml, int kp,
                    int width, bool mins, float *y, size_t ldy, int nw);

#endif
