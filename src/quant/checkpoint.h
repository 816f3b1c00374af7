/* Quantized checkpoints (checkpoint.c, over a reader per format: reader.h): which linears a
 * quantization_config covers, the splits its packing allows, and reading a rank's slice into
 * loom's layout. */
#ifndef LOOM_QUANT_CHECKPOINT_H
#define LOOM_QUANT_CHECKPOINT_H
#include "graph/module.h"
#include "model/quant_config.h"
#include "quant/quant.h"

/* Whether linear weight `name` ("<module>.weight") of this style is stored quantized: every
 * sharded linear and expert not in the ignore list; the LM head where the format says;
 * replicated ones (routers, gates) never. */
bool quant_checkpoint_applies(const quant_config *q, const char *name, par_style style);
/* Refuses a split into rows [r0, r0+nr) x columns [c0, c0+nc) that cuts a group or a packed
 * int32, naming the tensor and the numbers (at plan time, before any weight is read). */
int quant_checkpoint_check(const quant_config *q, const char *name, int rows, int cols, int r0, int nr, int c0, int nc,
                           loom_err *err);
/* Whether the files hold `name` in the format (else the module was left in float). */
bool quant_checkpoint_has(weight_store *ws, const quant_config *q, const char *name);
/* The slice, read from the checkpoint's tensors and repacked: rows r0, r0 + row_step, ... (nr
 * of them; a row_step over 1 only in MXFP4's interleaved experts). */
int quant_checkpoint_get(weight_store *ws, const quant_config *q, const char *name, int rows, int cols, int r0, int nr,
                         int row_step, int c0, int nc, wmat *out, loom_err *err);

#endif
