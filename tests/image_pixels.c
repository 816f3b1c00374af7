/* An image's pixels as loom makes them, for tests/image_pixels.py, which holds them to
 * transformers' (load_image and the model's image processor):
 *   image_pixels --decode IMAGE OUT           the upright RGB bytes
 *   image_pixels PREPROCESSOR_CONFIG IMAGE OUT  the processor's float32 planes
 * OUT starts with the height and width (two int32), then the values; a patching processor's,
 * with its patch count and a patch's values. A refused image prints
 * "refused: MESSAGE" and exits 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/processor.h"
#include "util/file.h"

static int write_out(const char *path, int h, int w, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    int32_t hw[2] = {h, w};
    int ok = f && fwrite(hw, sizeof hw, 1, f) == 1 && fwrite(data, 1, bytes, f) == bytes;
    if (f && fclose(f)) ok = 0;
    if (!ok) fprintf(stderr, "image_pixels: cannot write %s\n", path);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: image_pixels --decode IMAGE OUT | image_pixels PREPROCESSOR_CONFIG IMAGE OUT\n");
        return 2;
    }
    loom_err err = {{0}};
    image_processor proc;
    int decode_only = !strcmp(argv[1], "--decode");
    if (!decode_only && image_processor_load(&proc, argv[1], &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    size_t len = 0;
    char *bytes = file_read_all(argv[2], &len, &err);
    if (!bytes) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    image img;
    if (image_decode(bytes, len, IMAGE_MAX_PIXELS_DEFAULT, &img, &err) < 0) {
        printf("refused: %s\n", err.msg);
        free(bytes);
        return 3;
    }
    free(bytes);
    int rc;
    if (decode_only) {
        rc = write_out(argv[3], img.height, img.width, img.rgb, (size_t)img.width * img.height * 3);
    } else {
        image_pixels px;
        if (image_process(&proc, &img, &px, &err) < 0) {
            printf("refused: %s\n", err.msg);
            image_free(&img);
            return 3;
        }
        if (px.grid_h) /* patches: rows of patch_floats */
            rc = write_out(argv[3], px.grid_h * px.grid_w, px.patch_floats, px.data,
                           (size_t)px.grid_h * px.grid_w * px.patch_floats * sizeof(float));
        else rc = write_out(argv[3], px.height, px.width, px.data, (size_t)px.width * px.height * 3 * sizeof(float));
        image_pixels_free(&px);
    }
    image_free(&img);
    return rc;
}
