/* JPEG through libjpeg-turbo, with Pillow's settings (libjpeg's defaults: the slow exact integer
 * IDCT and fancy upsampling), to the RGB of Pillow's `convert("RGB")`: YCbCr converted by
 * libjpeg, gray replicated, and CMYK (inverted where an Adobe marker says so, as Photoshop
 * writes it) turned to RGB with Pillow's fixed-point formula. The EXIF block (APP1) gives the
 * orientation. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "image/image.h"
#include "util/alloc.h"
#include "util/err.h"

/* The decoder's state; the error path reads only this, which lives in the caller's frame. */
typedef struct jpeg_state {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    jmp_buf jump;
    uint8_t *rgb, *row;
    char msg[JMSG_LENGTH_MAX];
} jpeg_state;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_state *s = (jpeg_state *)cinfo->client_data;
    cinfo->err->format_message(cinfo, s->msg);
    longjmp(s->jump, 1);
}

/* libjpeg only warns of a file that ends early, and would give grey rows for the rest; Pillow
 * refuses the file ("image file is truncated"), and so does loom. Other warnings (extraneous
 * bytes before a marker, ...) are read past by both. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo);
}

/* Pillow's MULDIV255: a * b / 255, rounded, in integers */
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static void cmyk_to_rgb(const uint8_t *in, int w, int inverted, uint8_t *out) {
    for (int x = 0; x < w; x++, in += 4) {
        int c[4];
        for (int k = 0; k < 4; k++) c[k] = inverted ? 255 - in[k] : in[k];
        int nk = 255 - c[3];
        for (int k = 0; k < 3; k++) {
            int v = nk - muldiv255(c[k], nk);
            out[3 * x + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int jpeg_exif(struct jpeg_decompress_struct *cinfo) {
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6))
            return exif_orientation(m->data, m->data_length);
    return 1;
}

static int jpeg_run(jpeg_state *s, const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                    loom_err *err) {
    struct jpeg_decompress_struct *cinfo = &s->cinfo;
    if (setjmp(s->jump)) {
        free(s->rgb);
        free(s->row);
        return loom_errf(err, "JPEG: %s", s->msg);
    }
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, data, (unsigned long)size);
    jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(cinfo, TRUE);
    if (image_check_size("JPEG", cinfo->image_width, cinfo->image_height, max_pixels, err) < 0) return -1;
    int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB; /* gray is expanded to RGB by libjpeg */
    jpeg_start_decompress(cinfo);
    int w = (int)cinfo->output_width, h = (int)cinfo->output_height;
    s->rgb = mem_array((size_t)w * h, 3, "JPEG pixels", err);
    s->row = cmyk ? mem_array((size_t)w, 4, "JPEG row", err) : NULL;
    if (!s->rgb || (cmyk && !s->row)) {
        snprintf(s->msg, sizeof s->msg, "out of memory");
        longjmp(s->jump, 1);
    }
    while ((int)cinfo->output_scanline < h) {
        int y = (int)cinfo->output_scanline;
        JSAMPROW row = cmyk ? s->row : s->rgb + (size_t)y * w * 3;
        jpeg_read_scanlines(cinfo, &row, 1);
        if (cmyk) cmyk_to_rgb(s->row, w, cinfo->saw_Adobe_marker, s->rgb + (size_t)y * w * 3);
    }
    *orientation = jpeg_exif(cinfo);
    jpeg_finish_decompress(cinfo);
    free(s->row);
    out->width = w;
    out->height = h;
    out->rgb = s->rgb;
    return 0;
}

int image_decode_jpeg(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                      loom_err *err) {
    memset(out, 0, sizeof *out);
    *orientation = 1;
    jpeg_state *s = mem_zalloc(1, sizeof *s, "JPEG decoder", err);
    if (!s) return -1;
    s->cinfo.err = jpeg_std_error(&s->jerr);
    s->jerr.error_exit = jpeg_on_error;
    s->jerr.emit_message = jpeg_on_message;
    s->cinfo.client_data = s;
    int rc = jpeg_run(s, data, size, max_pixels, out, orientation, err);
    jpeg_destroy_decompress(&s->cinfo);
    free(s);
    return rc;
}
