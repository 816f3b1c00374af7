/* A model's image processor, read from its preprocessor_config.json, and the pixel values it
 * makes of a picture: the resize its class does, a centre crop where it has one, then the
 * rescale and normalisation in float32, channels first. The classes are transformers' (their
 * defaults apply where the file leaves a field out):
 *
 *   Gemma3ImageProcessor, SiglipImageProcessor   resize to size.height x size.width
 *   CLIPImageProcessor (LLaVA)                   shortest side to size.shortest_edge, then the
 *                                                crop_size centre crop
 *   Qwen2VLImageProcessor (Qwen2-VL, Qwen2.5-VL) each side to a multiple of patch x merge, the
 *                                                pixels within size.shortest_edge and
 *                                                longest_edge (smart_resize), then cut into
 *                                                patches, each repeated temporal_patch_size times
 *
 * Anything else, and options these classes have that loom does not do (Gemma 3's pan and
 * scan), are refused naming the field. */
#ifndef LOOM_IMAGE_PROCESSOR_H
#define LOOM_IMAGE_PROCESSOR_H
#include "image/image.h"

enum image_size_rule { IMAGE_SIZE_FIXED, IMAGE_SIZE_SHORTEST_EDGE, IMAGE_SIZE_PATCHES };

typedef struct image_processor {
    char type[64]; /* image_processor_type, "Fast" dropped */
    enum image_size_rule rule;
    int do_convert_rgb, do_resize, do_center_crop, do_rescale, do_normalize;
    int height, width; /* FIXED's target */
    int shortest_edge; /* SHORTEST_EDGE's */
    int crop_height, crop_width;
    enum image_filter resample;
    double rescale_factor;
    double mean[3], std[3];
    /* PATCHES: the pixels' bounds, the patch, the merge of patches into a token, the frames */
    int64_t min_pixels, max_pixels;
    int patch_size, merge_size, temporal_patch_size;
} image_processor;

/* Reads a preprocessor_config.json (the text, for errors named after path). */
int image_processor_parse(image_processor *p, const char *json, const char *path, loom_err *err);
int image_processor_load(image_processor *p, const char *path, loom_err *err);

/* A processed picture: 3 planes of height x width float32, R then G then B; or, by a
 * patching processor, grid_h x grid_w patches in its order (blocks of merge x merge row by row,
 * each block's patches row by row), each patch its (channel, frame, y, x) values. */
typedef struct image_pixels {
    int height, width;
    int grid_h, grid_w; /* 0: planes */
    int patch_floats;   /* a patch's values: 3 x temporal_patch_size x patch_size^2 */
    float *data;
} image_pixels;

void image_pixels_free(image_pixels *px);
int image_process(const image_processor *p, const image *img, image_pixels *out, loom_err *err);

#endif
