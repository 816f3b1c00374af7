/* The AMX int8 panel (amx.c), which the avx512amx variant's table holds as panel_q8. */
#ifndef LOOM_CPU_AMX_H
#define LOOM_CPU_AMX_H
#include "cpu/cpu.h"

void amx_panel_q8(const q8row *x, size_t x_stride, int nr, const uint8_t *w, size_t ld, const struct qlayout *q,
                  const float *sz, uint8_t *pack, float *y, size_t ldy);

#endif
