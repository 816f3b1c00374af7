/* An image file's bytes to an upright RGB picture: the format by its signature, the size bound
 * that stops decompression bombs, and the EXIF turn (transformers' load_image: Pillow's open,
 * exif_transpose, convert("RGB")). */
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "util/err.h"

void image_free(image *img) {
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

enum image_format image_sniff(const void *data, size_t size) {
    const uint8_t *p = data;
    if (size >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return IMAGE_JPEG;
    if (size >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return IMAGE_PNG;
    if (size >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return IMAGE_WEBP;
    return IMAGE_UNKNOWN;
}

const char *image_format_name(enum image_format f) {
    switch (f) {
    case IMAGE_JPEG: return "JPEG";
    case IMAGE_PNG: return "PNG";
    case IMAGE_WEBP: return "WebP";
    default: return "unknown";
    }
}

void image_whiten_key(image *img) {
    if (!img->has_key) return;
    for (size_t i = 0; i < (size_t)img->width * img->height; i++) {
        uint8_t *p = img->rgb + 3 * i;
        if (p[0] == img->key[0] && p[1] == img->key[1] && p[2] == img->key[2]) p[0] = p[1] = p[2] = 255;
    }
}

int image_check_size(const char *format, int64_t width, int64_t height, int64_t max_pixels, loom_err *err) {
    if (width < 1 || height < 1)
        return loom_errf(err, "%s: the picture is empty (%lldx%lld)", format, (long long)width, (long long)height);
    if (width > max_pixels / height)
        return loom_errf(err, "%s: %lldx%lld is more than the %lld pixels allowed", format, (long long)width,
                         (long long)height, (long long)max_pixels);
    return 0;
}

int image_decode(const void *data, size_t size, int64_t max_pixels, image *out, loom_err *err) {
    memset(out, 0, sizeof *out);
    int orientation = 1, rc;
    switch (image_sniff(data, size)) {
    case IMAGE_JPEG: rc = image_decode_jpeg(data, size, max_pixels, out, &orientation, err); break;
    case IMAGE_PNG: rc = image_decode_png(data, size, max_pixels, out, &orientation, err); break;
    case IMAGE_WEBP: rc = image_decode_webp(data, size, max_pixels, out, &orientation, err); break;
    default: return loom_errf(err, "not a JPEG, PNG or WebP file (%zu bytes)", size);
    }
    if (rc < 0) return -1;
    if (image_orient(out, orientation, err) < 0) {
        image_free(out);
        return -1;
    }
    return 0;
}
