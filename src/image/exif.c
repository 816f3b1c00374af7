/* The EXIF Orientation tag and the turn it asks for. Written here because only one tag of one
 * directory is needed, which libexif would bring a dependency for: the block is a TIFF header
 * (byte order, the first directory's offset), then that directory's 12-byte entries. Every
 * offset is checked against the block, which comes from an untrusted file. */
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "util/alloc.h"
#include "util/err.h"

static unsigned rd16(const uint8_t *p, int le) {
    return le ? (unsigned)p[0] | (unsigned)p[1] << 8 : (unsigned)p[0] << 8 | p[1];
}

static uint32_t rd32(const uint8_t *p, int le) {
    return le ? (uint32_t)rd16(p, 1) | (uint32_t)rd16(p + 2, 1) << 16 : (uint32_t)rd16(p, 0) << 16 | rd16(p + 2, 0);
}

int exif_orientation(const uint8_t *exif, size_t len) {
    if (!exif) return 1;
    if (len >= 6 && !memcmp(exif, "Exif\0\0", 6)) {
        exif += 6;
        len -= 6;
    }
    if (len < 8) return 1;
    int le;
    if (!memcmp(exif, "II*\0", 4)) le = 1;
    else if (!memcmp(exif, "MM\0*", 4)) le = 0;
    else return 1;
    uint32_t ifd = rd32(exif + 4, le);
    if (ifd > len - 2) return 1;
    unsigned n = rd16(exif + ifd, le);
    for (unsigned i = 0; i < n; i++) {
        size_t at = (size_t)ifd + 2 + (size_t)i * 12;
        if (at + 12 > len) break;
        const uint8_t *e = exif + at;
        if (rd16(e, le) != 0x0112) continue;
        unsigned type = rd16(e + 2, le);
        unsigned v = type == 3 ? rd16(e + 8, le) : type == 4 ? rd32(e + 8, le) : 1;
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

/* Where output pixel (x, y) of the turned picture comes from, for a w x h source: Pillow's
 * transpose for each orientation (2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 270,
 * 7 transverse, 8 rotate 90, the last four swapping the sides). */
static void orient_source(int o, int w, int h, int x, int y, int *sx, int *sy) {
    switch (o) {
    case 2: *sx = w - 1 - x, *sy = y; break;
    case 3: *sx = w - 1 - x, *sy = h - 1 - y; break;
    case 4: *sx = x, *sy = h - 1 - y; break;
    case 5: *sx = y, *sy = x; break;
    case 6: *sx = y, *sy = h - 1 - x; break;
    case 7: *sx = w - 1 - y, *sy = h - 1 - x; break;
    default: *sx = w - 1 - y, *sy = x; break; /* 8 */
    }
}

int image_orient(image *img, int orientation, loom_err *err) {
    if (orientation < 2 || orientation > 8) return 0;
    int w = img->width, h = img->height, swap = orientation >= 5;
    int ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *rgb = mem_array((size_t)w * h, 3, "turned image", err);
    if (!rgb) return -1;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            orient_source(orientation, w, h, x, y, &sx, &sy);
            memcpy(rgb + ((size_t)y * ow + x) * 3, img->rgb + ((size_t)sy * w + sx) * 3, 3);
        }
    free(img->rgb);
    img->rgb = rgb;
    img->width = ow;
    img->height = oh;
    return 0;
}
