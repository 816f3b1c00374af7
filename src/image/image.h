/* Images in: a file's bytes decoded to 8-bit RGB (JPEG, PNG, WebP), turned upright by its EXIF
 * orientation, and made into a model's pixel values by its processor (preprocessor_config.json).
 *
 * The oracle is transformers: `load_image` (Pillow's decoders, `ImageOps.exif_transpose`,
 * `convert("RGB")`) and then the model's image processor, whose default backend resizes uint8
 * tensors with torchvision (torch's fixed-point antialiased kernel). Each step here follows the
 * same arithmetic so the pixels are the same bits; docs/DESIGN.md section 3.17 says where and why. */
#ifndef LOOM_IMAGE_IMAGE_H
#define LOOM_IMAGE_IMAGE_H
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* An 8-bit RGB picture: rows top to bottom, each pixel's R, G, B together. */
typedef struct image {
    int width, height;
    uint8_t *rgb; /* width * height * 3 bytes, malloc'd */
    /* A PNG's transparent colour (tRNS) as Pillow keeps it through convert("RGB"), which
     * transformers' processors paint white (image_whiten_key); values above 255 match nothing. */
    int has_key, key[3];
} image;

void image_free(image *img);

/* The formats by their first bytes; IMAGE_UNKNOWN for anything else. */
enum image_format { IMAGE_UNKNOWN, IMAGE_JPEG, IMAGE_PNG, IMAGE_WEBP };
enum image_format image_sniff(const void *data, size_t size);
const char *image_format_name(enum image_format f);

/* The default bound on width * height, checked against the header before any pixel is
 * decoded, so a small file that declares a huge picture (a decompression bomb) is refused. */
#define IMAGE_MAX_PIXELS_DEFAULT (64LL << 20)

/* Decodes a JPEG, PNG or WebP file to RGB, upright. Refuses, naming the reason: an unknown or
 * corrupt or truncated file, and a picture above max_pixels. Where the file has several frames
 * (APNG, animated WebP) the first is the picture, as Pillow's. */
int image_decode(const void *data, size_t size, int64_t max_pixels, image *out, loom_err *err);

/* The formats' decoders (png.c, jpeg.c, webp.c), for image_decode. Each fills out with an RGB
 * picture as the file stores it, and *orientation with its EXIF orientation (1 without one). */
int image_decode_png(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation, loom_err *err);
int image_decode_jpeg(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                      loom_err *err);
int image_decode_webp(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                      loom_err *err);
/* width * height within 1..max_pixels, or an error naming the format and the size. */
int image_check_size(const char *format, int64_t width, int64_t height, int64_t max_pixels, loom_err *err);

/* The EXIF Orientation tag (1-8) of an EXIF block ("Exif\0\0" and a TIFF header, or the TIFF
 * header alone); 1 (as stored) when there is none or the block cannot be read, as Pillow. */
int exif_orientation(const uint8_t *exif, size_t len);
/* Paints the pixels of img's transparent colour white, as transformers' processors do (their
 * convert_to_rgb composites the colour-keyed picture onto white); none without a key. */
void image_whiten_key(image *img);
/* Turns img upright for an orientation 2-8 (1 leaves it); a new buffer, the old one freed. */
int image_orient(image *img, int orientation, loom_err *err);

/* Resampling filters, numbered as PIL's (preprocessor_config.json's "resample"). */
enum image_filter { IMAGE_NEAREST = 0, IMAGE_LANCZOS = 1, IMAGE_BILINEAR = 2, IMAGE_BICUBIC = 3 };

/* Resizes to width x height as torchvision's resize of a uint8 image with antialias on: the
 * horizontal pass then the vertical, each output pixel a sum of int16 weights times bytes,
 * rounded and clamped to a byte (bilinear and bicubic). A side already at its size is not
 * resampled. */
int image_resize(const image *src, int width, int height, enum image_filter filter, image *out, loom_err *err);

#endif
