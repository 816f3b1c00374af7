/* Resizing a uint8 RGB picture as torchvision does (transformers' default image backend): torch's
 * antialiased separable kernel for uint8, which follows Pillow's resampling but with int16
 * weights at a precision chosen per axis. Written here because the pixels must be those bits:
 * a float resize (or Pillow's own int32 weights) differs from it by one level in places, and no
 * C library implements torch's variant.
 *
 * Per axis, output pixel i covers the input interval centred at (i + 0.5) * scale, widened by the
 * filter's support times the scale when shrinking (the antialiasing). Its weights are the filter
 * at each input pixel's centre, normalised to sum 1 in double, then scaled by 2^precision and
 * rounded to int16, precision being the largest (below 22) that keeps the axis's largest weight
 * under 2^15. A pass sums weight times byte in int32 from half a unit, shifts and clamps to a
 * byte. The horizontal pass runs first, over every input row; the vertical pass reads its bytes.
 * Integer sums make the order of the products irrelevant, so any vectorisation gives these bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "util/alloc.h"
#include "util/err.h"

/* One axis's taps: output pixel i reads input pixels first[i] .. first[i] + count[i] - 1 with
 * weights w[i * taps ...]. */
typedef struct axis_taps {
    int taps;
    int *first, *count;
    int16_t *w;
    int precision;
} axis_taps;

static double filter_linear(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic convolution with a = -0.5, as Pillow and torch */
static double filter_cubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

static void axis_free(axis_taps *t) {
    free(t->first);
    free(t->count);
    free(t->w);
    memset(t, 0, sizeof *t);
}

static int axis_weights(int in, int out, enum image_filter filter, axis_taps *t, loom_err *err) {
    double (*fn)(double) = filter == IMAGE_BICUBIC ? filter_cubic : filter_linear;
    int interp = filter == IMAGE_BICUBIC ? 4 : 2;
    double scale = (double)in / out;
    double support = scale >= 1.0 ? interp * 0.5 * scale : interp * 0.5;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    memset(t, 0, sizeof *t);
    t->taps = (int)ceil(support) * 2 + 1;
    double *wd = mem_array((size_t)out * t->taps, sizeof *wd, "resize weights", err);
    t->first = mem_array((size_t)out, sizeof *t->first, "resize taps", err);
    t->count = mem_array((size_t)out, sizeof *t->count, "resize taps", err);
    t->w = mem_array((size_t)out * t->taps, sizeof *t->w, "resize weights", err);
    if (!wd || !t->first || !t->count || !t->w) {
        free(wd);
        axis_free(t);
        return -1;
    }
    double wmax = 0.0;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5);
        /* truncation toward zero, as the C++ casts */
        int64_t lo = (int64_t)(center - support + 0.5);
        int64_t hi = (int64_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int64_t n = hi - lo;
        if (n < 0) n = 0;
        if (n > t->taps) n = t->taps; /* rounding can reach one past the support: torch clips it too */
        double *w = wd + (size_t)i * t->taps, total = 0.0;
        for (int j = 0; j < n; j++) {
            w[j] = fn(((double)(j + lo) - center + 0.5) * invscale);
            total += w[j];
        }
        for (int j = 0; j < n; j++) {
            if (total != 0.0) w[j] /= total;
            if (w[j] > wmax) wmax = w[j];
        }
        for (int j = (int)n; j < t->taps; j++) w[j] = 0.0;
        t->first[i] = (int)lo;
        t->count[i] = (int)n;
    }
    int p = 0;
    while (p < 22 && (int)(0.5 + wmax * (1 << (p + 1))) < (1 << 15)) p++;
    t->precision = p;
    for (size_t k = 0; k < (size_t)out * t->taps; k++) {
        double v = wd[k] * (1 << p);
        t->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wd);
    return 0;
}

static uint8_t clamp_byte(int32_t sum, int precision) {
    int32_t v = sum >> precision; /* arithmetic: bicubic's sums may be negative */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* src rows of sw pixels -> dst rows of t->... pixels, h rows */
static void pass_horizontal(const uint8_t *src, int sw, int h, const axis_taps *t, int dw, uint8_t *dst) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * sw * 3;
        uint8_t *o = dst + (size_t)y * dw * 3;
        for (int x = 0; x < dw; x++) {
            const int16_t *w = t->w + (size_t)x * t->taps;
            const uint8_t *p = row + (size_t)t->first[x] * 3;
            int32_t r = 1 << (t->precision - 1), g = r, b = r;
            for (int j = 0; j < t->count[x]; j++, p += 3) {
                r += p[0] * w[j];
                g += p[1] * w[j];
                b += p[2] * w[j];
            }
            o[3 * x] = clamp_byte(r, t->precision);
            o[3 * x + 1] = clamp_byte(g, t->precision);
            o[3 * x + 2] = clamp_byte(b, t->precision);
        }
    }
}

static void pass_vertical(const uint8_t *src, int w3, const axis_taps *t, int dh, uint8_t *dst) {
    for (int y = 0; y < dh; y++) {
        const int16_t *w = t->w + (size_t)y * t->taps;
        const uint8_t *col = src + (size_t)t->first[y] * w3;
        uint8_t *o = dst + (size_t)y * w3;
        for (int c = 0; c < w3; c++) {
            int32_t s = 1 << (t->precision - 1);
            for (int j = 0; j < t->count[y]; j++) s += col[(size_t)j * w3 + c] * w[j];
            o[c] = clamp_byte(s, t->precision);
        }
    }
}

int image_resize(const image *src, int width, int height, enum image_filter filter, image *out, loom_err *err) {
    memset(out, 0, sizeof *out);
    if (filter != IMAGE_BILINEAR && filter != IMAGE_BICUBIC)
        return loom_errf(err, "image resize: resample %d is not supported (2, bilinear, and 3, bicubic, are)",
                         (int)filter);
    if (width < 1 || height < 1) return loom_errf(err, "image resize: target %dx%d is empty", width, height);
    out->rgb = mem_array((size_t)width * height, 3, "resized image", err);
    if (!out->rgb) return -1;
    out->width = width;
    out->height = height;
    const uint8_t *cur = src->rgb;
    uint8_t *mid = NULL;
    axis_taps t = {0};
    int rc = -1;
    if (width == src->width && height == src->height) {
        memcpy(out->rgb, src->rgb, (size_t)width * height * 3);
        return 0;
    }
    if (width != src->width) {
        if (axis_weights(src->width, width, filter, &t, err) < 0) goto done;
        uint8_t *dst = out->rgb;
        if (height != src->height) {
            dst = mid = mem_array((size_t)width * src->height, 3, "resize rows", err);
            if (!mid) goto done;
        }
        pass_horizontal(src->rgb, src->width, src->height, &t, width, dst);
        axis_free(&t);
        cur = dst;
    }
    if (height != src->height) {
        if (axis_weights(src->height, height, filter, &t, err) < 0) goto done;
        pass_vertical(cur, width * 3, &t, height, out->rgb);
        axis_free(&t);
    }
    rc = 0;
done:
    free(mid);
    axis_free(&t);
    if (rc < 0) image_free(out);
    return rc;
}
