/* PNG through libpng, to the RGB that Pillow's `convert("RGB")` gives: palettes looked up, gray
 * replicated (1, 2 and 4 bits scaled by bit replication), alpha and tRNS dropped, not composited,
 * and 16-bit samples cut to their high byte, except 16-bit gray alone, which Pillow holds as an
 * integer and clips at 255. Gamma and colour profiles are not applied, as Pillow does not. */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "util/alloc.h"
#include "util/err.h"

/* The read state; the buffers live here, not in locals, so a longjmp out of libpng finds them. */
typedef struct png_reader {
    const uint8_t *data;
    size_t size, pos;
    png_structp png;
    png_infop info;
    uint8_t *rows, *rgb;
    png_bytep *row_ptrs;
    char msg[200]; /* libpng's last error */
} png_reader;

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    png_reader *r = png_get_io_ptr(png);
    if (n > r->size - r->pos) png_error(png, "file is truncated");
    memcpy(out, r->data + r->pos, n);
    r->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_reader *r = png_get_error_ptr(png);
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* benign (an unknown chunk, a bad CRC in an ancillary one): Pillow reads on too */
}

/* A 16-bit gray row (big-endian) to RGB, each value clipped at 255 (Pillow's I;16 to RGB). */
static void gray16_clip(const uint8_t *row, int w, uint8_t *out) {
    for (int x = 0; x < w; x++) {
        unsigned v = (unsigned)row[2 * x] << 8 | row[2 * x + 1];
        out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = (uint8_t)(v > 255 ? 255 : v);
    }
}

/* The orientation in the eXIf chunk, found by walking the chunks (each a 4-byte length, a 4-byte
 * type, the data and a CRC); the file was read whole, so every chunk is in bounds. */
static int png_exif_orientation(const uint8_t *data, size_t size) {
    size_t at = 8;
    while (at + 12 <= size) {
        uint32_t n =
            (uint32_t)data[at] << 24 | (uint32_t)data[at + 1] << 16 | (uint32_t)data[at + 2] << 8 | data[at + 3];
        if (n > size - at - 12 || !memcmp(data + at + 4, "IEND", 4)) break;
        if (!memcmp(data + at + 4, "eXIf", 4)) return exif_orientation(data + at + 8, n);
        at += 12 + (size_t)n;
    }
    return 1;
}

/* The transparent colour Pillow keeps from a tRNS chunk (convert("RGB") carries it as the image's
 * "transparency"): a palette's, where exactly one entry is transparent and the rest opaque
 * (other palettes' alpha is dropped); gray's as (t, t, t) in the file's own bit depth; RGB's
 * (r, g, b). Pillow holds 1-bit and 16-bit gray keys as one integer (1-bit's times 255), which an
 * RGB picture reads as the colour 0xBBGGRR. */
static void png_key(png_structp png, png_infop info, image *img) {
    png_bytep alpha = NULL;
    int n = 0;
    png_color_16p c = NULL;
    if (!png_get_tRNS(png, info, &alpha, &n, &c)) return;
    int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_colorp pal = NULL;
        int npal = 0, zero = -1;
        png_get_PLTE(png, info, &pal, &npal);
        for (int i = 0; i < n; i++) {
            if (alpha[i] != 0 && alpha[i] != 255) return;
            if (alpha[i] == 0) {
                if (zero >= 0) return;
                zero = i;
            }
        }
        if (zero < 0 || zero >= npal) return;
        img->key[0] = pal[zero].red, img->key[1] = pal[zero].green, img->key[2] = pal[zero].blue;
    } else if (ctype == PNG_COLOR_TYPE_GRAY) {
        unsigned t = c->gray;
        if (depth == 1 || depth == 16) {
            unsigned v = depth == 1 ? t * 255 : t;
            img->key[0] = (int)(v & 255), img->key[1] = (int)(v >> 8 & 255), img->key[2] = 0;
        } else {
            img->key[0] = img->key[1] = img->key[2] = (int)t;
        }
    } else if (ctype == PNG_COLOR_TYPE_RGB) {
        img->key[0] = c->red, img->key[1] = c->green, img->key[2] = c->blue;
    } else {
        return;
    }
    img->has_key = 1;
}

/* The decoding proper. The setjmp is here and the state in the caller's r, so what libpng's
 * longjmp unwinds past is only this frame's, and every value the error path reads is r's. */
static int png_run(png_reader *r, int64_t max_pixels, image *out, loom_err *err) {
    if (setjmp(png_jmpbuf(r->png))) {
        if (r->rgb != r->rows) free(r->rgb);
        free(r->rows);
        png_free(r->png, r->row_ptrs);
        return loom_errf(err, "PNG: %s", r->msg[0] ? r->msg : "cannot be decoded");
    }
    png_structp png = r->png;
    png_infop info = r->info;
    png_set_read_fn(png, r, png_read_mem);
    /* The header's own limit is a million a side; ours is the pixel count, checked below before
     * any row is allocated. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (image_check_size("PNG", w, h, max_pixels, err) < 0) return -1;
    png_key(png, info, out); /* before the transforms, which rewrite info's type and depth */
    int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
    int gray16 = ctype == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (!gray16) {
        png_set_strip_16(png); /* the high byte, as Pillow's ";16B" raw modes */
        png_set_strip_alpha(png);
        if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    }
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t stride = png_get_rowbytes(png, info);
    if (stride != (size_t)w * (gray16 ? 2 : 3)) png_error(png, "unexpected row layout after the transforms");
    r->rows = mem_array(h, stride, "PNG rows", err);
    r->rgb = gray16 ? mem_array((size_t)w * h, 3, "PNG pixels", err) : r->rows;
    if (!r->rows || !r->rgb) png_error(png, "out of memory");
    r->row_ptrs = png_malloc(png, sizeof(png_bytep) * h);
    for (png_uint_32 y = 0; y < h; y++) r->row_ptrs[y] = r->rows + (size_t)y * stride;
    png_read_image(png, r->row_ptrs);
    png_free(png, r->row_ptrs);
    r->row_ptrs = NULL;
    if (gray16) {
        for (png_uint_32 y = 0; y < h; y++)
            gray16_clip(r->rows + (size_t)y * stride, (int)w, r->rgb + (size_t)y * w * 3);
        free(r->rows);
    }
    out->width = (int)w;
    out->height = (int)h;
    out->rgb = r->rgb;
    return 0;
}

int image_decode_png(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                     loom_err *err) {
    memset(out, 0, sizeof *out);
    *orientation = 1;
    png_reader r = {.data = data, .size = size};
    r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
    r.info = r.png ? png_create_info_struct(r.png) : NULL;
    int rc = r.info ? png_run(&r, max_pixels, out, err) : loom_errf(err, "PNG: cannot set up the decoder");
    png_destroy_read_struct(&r.png, r.info ? &r.info : NULL, NULL);
    if (rc == 0) *orientation = png_exif_orientation(data, size);
    return rc;
}
