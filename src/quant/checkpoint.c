/* Quantized checkpoints: the table of formats, one row each (its reader: quant/reader.h), and
 * what every format shares: which linears a quantization_config covers, and reading a rank's
 * slice once, kept for a later plan over the same slice. A new format is a reader and its
 * rows. */
#include "quant/reader.h"
#include "util/err.h"

static const ckpt_reader *const readers[] = {
    [QF_GPTQ] = &int_reader,   [QF_AWQ] = &int_reader, [QF_CT_PACKED] = &int_reader, [QF_CT_INT] = &int_reader,
    [QF_CT_FP8] = &fp8_reader, [QF_FP8] = &fp8_reader, [QF_MXFP4] = &mxfp4_reader,   [QF_GGUF] = &gguf_reader,
};

static const ckpt_reader *reader_of(const quant_config *q) {
    return q->format > QF_NONE && (size_t)q->format < sizeof readers / sizeof *readers ? readers[q->format] : NULL;
}

bool quant_checkpoint_applies(const quant_config *q, const char *name, par_style style) {
    const ckpt_reader *r = reader_of(q);
    if (!r || style == PAR_REPLICATED) return false;
    char mod[256];
    ckpt_module_of(name, mod, sizeof mod);
    if (quant_config_ignores(q, mod)) return false;
    return style != PAR_VOCAB || r->head(q);
}

int quant_checkpoint_check(const quant_config *q, const char *name, int rows, int cols, int r0, int nr, int c0, int nc,
                           loom_err *err) {
    const ckpt_reader *r = reader_of(q);
    ckpt_slice s = {rows, cols, r0, nr, 1, c0, nc};
    return r ? r->check(q, name, &s, err) : 0;
}

bool quant_checkpoint_has(weight_store *ws, const quant_config *q, const char *name) {
    const ckpt_reader *r = reader_of(q);
    return r && !ws->dummy && r->has(ws, q, name);
}

int quant_checkpoint_get(weight_store *ws, const quant_config *q, const char *name, int rows, int cols, int r0, int nr,
                         int row_step, int c0, int nc, wmat *out, loom_err *err) {
    if (weights_made_find(ws, name, r0, nr, c0, nc, true, DT_F32, out)) return 0;
    const ckpt_reader *r = reader_of(q);
    ckpt_slice s = {rows, cols, r0, nr, row_step, c0, nc};
    if (!r) return loom_errf(err, "%s: not a quantized checkpoint format", name);
    if (row_step > 1 && !r->row_step)
        return loom_errf(err, "%s: interleaved rows in a %s checkpoint are not supported", name,
                         quant_format_name(q->format));
    if (r->check(q, name, &s, err) || r->get(ws, q, name, &s, out, err)) return -1;
    return weights_made_keep(ws, name, r0, nr, c0, nc, out, err);
}
