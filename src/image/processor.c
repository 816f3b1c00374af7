/* preprocessor_config.json to an image_processor, and a picture to its pixel values, step for
 * step as transformers' torchvision backend: resize (resize.c), centre crop with zero padding
 * where the crop is larger, then one fused float32 pass, (x - mean * 255) / (std * 255) for
 * rescale 1/255 (the mean and std scaled by 1 / rescale_factor in float32 first), so each value
 * is rounded as transformers rounds it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/processor.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/file.h"

static const double openai_clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
static const double openai_clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

/* A boolean field; absent or null keeps the class default. */
static int read_flag(const cJSON *root, const char *key, int *v, const char *path, loom_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsBool(f)) return loom_errf(err, "%s: \"%s\" must be true or false", path, key);
    *v = cJSON_IsTrue(f);
    return 0;
}

static int read_int(const cJSON *obj, const char *key, int *v, const char *where, const char *path, loom_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsNumber(f) || f->valuedouble != (double)(int)f->valuedouble || f->valuedouble < 1 ||
        f->valuedouble > 1 << 16)
        return loom_errf(err, "%s: \"%s%s\" must be an integer from 1 to 65536", path, where, key);
    *v = (int)f->valuedouble;
    return 0;
}

/* image_mean / image_std: three numbers, or one for every channel */
static int read_triple(const cJSON *root, const char *key, double v[3], int positive, const char *path, loom_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!f || cJSON_IsNull(f)) return 0;
    if (cJSON_IsNumber(f)) {
        v[0] = v[1] = v[2] = f->valuedouble;
    } else if (cJSON_IsArray(f) && cJSON_GetArraySize(f) == 3) {
        for (int i = 0; i < 3; i++) {
            const cJSON *e = cJSON_GetArrayItem(f, i);
            if (!cJSON_IsNumber(e)) return loom_errf(err, "%s: \"%s\"[%d] is not a number", path, key, i);
            v[i] = e->valuedouble;
        }
    } else {
        return loom_errf(err, "%s: \"%s\" must be a number or a list of 3", path, key);
    }
    for (int i = 0; i < 3; i++)
        if (positive && !(v[i] > 0)) return loom_errf(err, "%s: \"%s\" must be above 0", path, key);
    return 0;
}

static int read_size(const cJSON *root, const char *key, int *h, int *w, int *edge, const char *path, loom_err *err) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!s || cJSON_IsNull(s)) return 0;
    if (!cJSON_IsObject(s)) return loom_errf(err, "%s: \"%s\" must be an object", path, key);
    char where[32];
    snprintf(where, sizeof where, "%s.", key);
    if (read_int(s, "height", h, where, path, err) < 0 || read_int(s, "width", w, where, path, err) < 0) return -1;
    return edge ? read_int(s, "shortest_edge", edge, where, path, err) : 0;
}

/* A patching processor's fields: the pixel bounds (size.shortest_edge and longest_edge, or the
 * older min_pixels and max_pixels, which win as transformers' constructor lets them) and the
 * patch geometry. */
static int read_patches(const cJSON *root, image_processor *p, const char *path, loom_err *err) {
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(root, "size");
    const char *keys[4] = {"shortest_edge", "longest_edge", "min_pixels", "max_pixels"};
    int64_t *into[4] = {&p->min_pixels, &p->max_pixels, &p->min_pixels, &p->max_pixels};
    for (int i = 0; i < 4; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(i < 2 ? size : root, keys[i]);
        if (!f || cJSON_IsNull(f)) continue;
        if (!cJSON_IsNumber(f) || f->valuedouble < 1 || f->valuedouble > 1e12)
            return loom_errf(err, "%s: \"%s%s\" must be a pixel count from 1", path, i < 2 ? "size." : "", keys[i]);
        *into[i] = (int64_t)f->valuedouble;
    }
    if (p->min_pixels > p->max_pixels)
        return loom_errf(err, "%s: the smallest pixel count %lld is above the largest %lld", path,
                         (long long)p->min_pixels, (long long)p->max_pixels);
    if (read_int(root, "patch_size", &p->patch_size, "", path, err) < 0 ||
        read_int(root, "merge_size", &p->merge_size, "", path, err) < 0 ||
        read_int(root, "temporal_patch_size", &p->temporal_patch_size, "", path, err) < 0)
        return -1;
    return 0;
}

int image_processor_parse(image_processor *p, const char *json, const char *path, loom_err *err) {
    memset(p, 0, sizeof *p);
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_errf(err, "%s: not a JSON object", path);
    }
    int rc = -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "image_processor_type");
    if (!cJSON_IsString(t)) {
        loom_errf(err, "%s: \"image_processor_type\" is missing", path);
        goto done;
    }
    snprintf(p->type, sizeof p->type, "%s", t->valuestring);
    size_t n = strlen(p->type);
    if (n > 4 && !strcmp(p->type + n - 4, "Fast")) p->type[n - 4] = 0;
    /* the class defaults (transformers' class attributes) */
    p->do_convert_rgb = p->do_resize = p->do_rescale = p->do_normalize = 1;
    p->rescale_factor = 1.0 / 255;
    if (!strcmp(p->type, "Gemma3ImageProcessor") || !strcmp(p->type, "SiglipImageProcessor")) {
        p->rule = IMAGE_SIZE_FIXED;
        p->height = p->width = 224;
        p->resample = IMAGE_BILINEAR;
        for (int i = 0; i < 3; i++) p->mean[i] = p->std[i] = 0.5;
    } else if (!strcmp(p->type, "CLIPImageProcessor")) {
        p->rule = IMAGE_SIZE_SHORTEST_EDGE;
        p->shortest_edge = p->crop_height = p->crop_width = 224;
        p->do_center_crop = 1;
        p->resample = IMAGE_BICUBIC;
        memcpy(p->mean, openai_clip_mean, sizeof p->mean);
        memcpy(p->std, openai_clip_std, sizeof p->std);
    } else if (!strcmp(p->type, "Qwen2VLImageProcessor")) {
        p->rule = IMAGE_SIZE_PATCHES;
        p->resample = IMAGE_BICUBIC;
        memcpy(p->mean, openai_clip_mean, sizeof p->mean);
        memcpy(p->std, openai_clip_std, sizeof p->std);
        p->min_pixels = 56 * 56, p->max_pixels = 28 * 28 * 1280;
        p->patch_size = 14, p->merge_size = 2, p->temporal_patch_size = 2;
    } else {
        loom_errf(err,
                  "%s: image_processor_type \"%s\" is not supported (Gemma3ImageProcessor, SiglipImageProcessor, "
                  "CLIPImageProcessor and Qwen2VLImageProcessor are)",
                  path, t->valuestring);
        goto done;
    }
    int edge = 0, pan = 0, resample = p->resample;
    if (read_flag(root, "do_convert_rgb", &p->do_convert_rgb, path, err) < 0 ||
        read_flag(root, "do_resize", &p->do_resize, path, err) < 0 ||
        read_flag(root, "do_rescale", &p->do_rescale, path, err) < 0 ||
        read_flag(root, "do_normalize", &p->do_normalize, path, err) < 0 ||
        read_flag(root, "do_center_crop", &p->do_center_crop, path, err) < 0 ||
        read_flag(root, "do_pan_and_scan", &pan, path, err) < 0 ||
        read_size(root, "size", &p->height, &p->width, &edge, path, err) < 0 ||
        read_size(root, "crop_size", &p->crop_height, &p->crop_width, NULL, path, err) < 0 ||
        read_int(root, "resample", &resample, "", path, err) < 0 ||
        read_triple(root, "image_mean", p->mean, 0, path, err) < 0 ||
        read_triple(root, "image_std", p->std, 1, path, err) < 0)
        goto done;
    if (pan) {
        loom_errf(err, "%s: \"do_pan_and_scan\" is not supported", path);
        goto done;
    }
    if (p->rule == IMAGE_SIZE_PATCHES && read_patches(root, p, path, err) < 0) goto done;
    if (edge && p->rule != IMAGE_SIZE_PATCHES) {
        if (p->rule != IMAGE_SIZE_SHORTEST_EDGE) {
            loom_errf(err, "%s: \"size.shortest_edge\" is not read by %s (it resizes to height x width)", path,
                      p->type);
            goto done;
        }
        p->shortest_edge = edge;
    }
    if (resample != IMAGE_BILINEAR && resample != IMAGE_BICUBIC) {
        loom_errf(err, "%s: \"resample\" %d is not supported (2, bilinear, and 3, bicubic, are)", path, resample);
        goto done;
    }
    p->resample = (enum image_filter)resample;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "rescale_factor");
    if (rf && !cJSON_IsNull(rf)) {
        if (!cJSON_IsNumber(rf) || !(rf->valuedouble > 0)) {
            loom_errf(err, "%s: \"rescale_factor\" must be a number above 0", path);
            goto done;
        }
        p->rescale_factor = rf->valuedouble;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int image_processor_load(image_processor *p, const char *path, loom_err *err) {
    char *text = file_read_all(path, NULL, err);
    if (!text) return -1;
    int rc = image_processor_parse(p, text, path, err);
    free(text);
    return rc;
}

void image_pixels_free(image_pixels *px) {
    free(px->data);
    memset(px, 0, sizeof *px);
}

/* transformers' get_resize_output_image_size without default_to_square: the shorter side to
 * `edge`, the longer scaled and truncated */
static void shortest_edge_size(int h, int w, int edge, int *oh, int *ow) {
    int shorter = w <= h ? w : h, longer = w <= h ? h : w;
    int l = (int)((double)((int64_t)edge * longer) / shorter);
    *oh = w <= h ? l : edge;
    *ow = w <= h ? edge : l;
}

/* transformers' smart_resize: each side rounded (half to even, as Python's round) to a multiple of
 * factor, then scaled down or up by the square root of the pixel bound's ratio where the area
 * leaves [min_pixels, max_pixels]. An aspect ratio beyond 200 is refused, as transformers does. */
static int smart_resize(const image_processor *p, int h, int w, int *oh, int *ow, loom_err *err) {
    int factor = p->patch_size * p->merge_size;
    if ((double)(h > w ? h : w) / (h < w ? h : w) > 200)
        return loom_errf(err, "%s: the picture's aspect ratio %dx%d is beyond 200", p->type, w, h);
    double hb = nearbyint((double)h / factor) * factor, wb = nearbyint((double)w / factor) * factor;
    if (hb * wb > (double)p->max_pixels) {
        double beta = sqrt((double)h * w / (double)p->max_pixels);
        hb = fmax(factor, floor(h / beta / factor) * factor);
        wb = fmax(factor, floor(w / beta / factor) * factor);
    } else if (hb * wb < (double)p->min_pixels) {
        double beta = sqrt((double)p->min_pixels / ((double)h * w));
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    if (hb < factor || wb < factor || hb * wb > (double)(1 << 28))
        return loom_errf(err, "%s: a %dx%d picture resizes to %.0fx%.0f", p->type, w, h, wb, hb);
    *oh = (int)hb, *ow = (int)wb;
    return 0;
}

/* Planes [3][h][w] cut into the patching processor's patches (image_pixels' order) */
static void patchify(const image_processor *p, const float *planes, image_pixels *out, float *to) {
    int ps = p->patch_size, m = p->merge_size, t = p->temporal_patch_size, h = out->height, w = out->width;
    int gw = out->grid_w, row = 0;
    for (int by = 0; by < out->grid_h / m; by++)
        for (int bx = 0; bx < gw / m; bx++)
            for (int my = 0; my < m; my++)
                for (int mx = 0; mx < m; mx++, row++) {
                    float *o = to + (size_t)row * out->patch_floats;
                    int y0 = (by * m + my) * ps, x0 = (bx * m + mx) * ps;
                    for (int c = 0; c < 3; c++)
                        for (int f = 0; f < t; f++)
                            for (int y = 0; y < ps; y++, o += ps)
                                memcpy(o, planes + ((size_t)c * h + y0 + y) * w + x0, ps * sizeof *o);
                }
}

/* out's planes as the patching processor's patches, in place of them */
static int to_patches(const image_processor *p, image_pixels *out, loom_err *err) {
    int unit = p->patch_size * p->merge_size;
    if (out->height % unit || out->width % unit) {
        image_pixels_free(out);
        return loom_errf(err, "%s: %dx%d pixel values are not whole blocks of %d (do_resize off?)", p->type, out->width,
                         out->height, unit);
    }
    out->grid_h = out->height / p->patch_size, out->grid_w = out->width / p->patch_size;
    out->patch_floats = 3 * p->temporal_patch_size * p->patch_size * p->patch_size;
    float *patches =
        mem_array((size_t)out->grid_h * out->grid_w, (size_t)out->patch_floats * sizeof(float), "patches", err);
    if (!patches) {
        image_pixels_free(out);
        return -1;
    }
    patchify(p, out->data, out, patches);
    free(out->data);
    out->data = patches;
    return 0;
}

/* The crop's top left in the (conceptually zero-padded) picture: the padding puts the picture
 * at (pad_top, pad_left) of a canvas at least the crop's size. */
static void crop_origin(int side, int crop, int *pad, int *start) {
    *pad = crop > side ? (crop - side) / 2 : 0;
    int canvas = crop > side ? side + (crop - side) / 2 + (crop - side + 1) / 2 : side;
    *start = (int)((canvas - crop) / 2.0);
}

int image_process(const image_processor *p, const image *img, image_pixels *out, loom_err *err) {
    memset(out, 0, sizeof *out);
    image keyed = {0}, sized = {0};
    const image *cur = img;
    if (p->do_convert_rgb && img->has_key) {
        keyed = *img;
        keyed.rgb = mem_array((size_t)img->width * img->height, 3, "keyed image", err);
        if (!keyed.rgb) return -1;
        memcpy(keyed.rgb, img->rgb, (size_t)img->width * img->height * 3);
        image_whiten_key(&keyed);
        cur = &keyed;
    }
    if (p->do_resize) {
        int h = p->height, w = p->width;
        if (p->rule == IMAGE_SIZE_SHORTEST_EDGE) shortest_edge_size(cur->height, cur->width, p->shortest_edge, &h, &w);
        if ((p->rule == IMAGE_SIZE_PATCHES && smart_resize(p, cur->height, cur->width, &h, &w, err) < 0) ||
            image_resize(cur, w, h, p->resample, &sized, err) < 0) {
            image_free(&keyed);
            return -1;
        }
        cur = &sized;
    }
    int oh = cur->height, ow = cur->width, pad_top = 0, pad_left = 0, top = 0, left = 0;
    if (p->do_center_crop) {
        oh = p->crop_height;
        ow = p->crop_width;
        crop_origin(cur->height, oh, &pad_top, &top);
        crop_origin(cur->width, ow, &pad_left, &left);
    }
    out->data = mem_array((size_t)oh * ow, 3 * sizeof(float), "pixel values", err);
    if (!out->data) {
        image_free(&keyed);
        image_free(&sized);
        return -1;
    }
    out->height = oh;
    out->width = ow;
    /* transformers' fused constants: mean and std in float32, times 1 / rescale_factor in float32 */
    float scale = (float)p->rescale_factor, m[3], s[3];
    for (int c = 0; c < 3; c++) {
        m[c] = (float)p->mean[c] * (float)(1.0 / p->rescale_factor);
        s[c] = (float)p->std[c] * (float)(1.0 / p->rescale_factor);
    }
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            /* position in the padded canvas, then in the picture (outside it: padding's zero) */
            int sy = y + top - pad_top, sx = x + left - pad_left;
            int inside = sy >= 0 && sy < cur->height && sx >= 0 && sx < cur->width;
            for (int c = 0; c < 3; c++) {
                float v = inside ? cur->rgb[((size_t)sy * cur->width + sx) * 3 + c] : 0.0f;
                if (p->do_normalize) v = p->do_rescale ? (v - m[c]) / s[c] : (v - (float)p->mean[c]) / (float)p->std[c];
                else if (p->do_rescale) v = v * scale;
                out->data[((size_t)c * oh + y) * ow + x] = v;
            }
        }
    image_free(&keyed);
    image_free(&sized);
    return p->rule == IMAGE_SIZE_PATCHES ? to_patches(p, out, err) : 0;
}
