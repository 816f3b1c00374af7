/* libFuzzer target: the image decoders (JPEG, PNG, WebP, and the EXIF orientation) on arbitrary
 * bytes, bounded to a megapixel so a declared size cannot exhaust memory, and what they accept
 * through each kind of processor at small sizes (the resize, the crop and its padding,
 * smart_resize and the patches). */
#include "image/processor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    image img;
    loom_err err;
    if (image_decode(data, size, 1 << 20, &img, &err)) return 0;
    static const char *configs[] = {
        "{\"image_processor_type\": \"Gemma3ImageProcessor\", \"size\": {\"height\": 24, \"width\": 40}}",
        "{\"image_processor_type\": \"CLIPImageProcessor\", \"size\": {\"shortest_edge\": 20}, "
        "\"crop_size\": {\"height\": 28, \"width\": 16}}",
        "{\"image_processor_type\": \"Qwen2VLImageProcessor\", \"size\": {\"shortest_edge\": 3136, "
        "\"longest_edge\": 12544}}",
    };
    for (int i = 0; i < 3; i++) {
        image_processor p;
        image_pixels px;
        if (!image_processor_parse(&p, configs[i], "fuzz", &err) && !image_process(&p, &img, &px, &err))
            image_pixels_free(&px);
    }
    image_free(&img);
    return 0;
}
