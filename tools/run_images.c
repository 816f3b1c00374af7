/* The pictures of `loom run --image FILE`: decoded and made into pixel values by the model's
 * processor (its folder's preprocessor_config.json, else its class's defaults at the tower's
 * size), and the prompt's placeholders expanded as the model's processor expands them
 * (Gemma3Processor: each "<start_of_image>" becomes "\n\n<start_of_image>", the image token
 * image_tokens times, "<end_of_image>\n\n"), before the prompt is tokenized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "image/processor.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/file.h"

/* The processor: the folder's file, or Gemma 3's defaults at the tower's size (a bare config) */
static int load_processor(const loom_model_info *info, image_processor *p, loom_err *err) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", info->source);
    if (!stat(info->source, &st) && S_ISDIR(st.st_mode) && !stat(path, &st)) return image_processor_load(p, path, err);
    char json[200];
    snprintf(json, sizeof json,
             "{\"image_processor_type\": \"Gemma3ImageProcessor\", \"size\": {\"height\": %d, \"width\": %d}}",
             info->image_size, info->image_size);
    return image_processor_parse(p, json, "Gemma 3's default processor", err);
}

float *run_image_pixels(const loom_model *m, const char *const *files, int n, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(m, &info);
    if (!info.image_tokens) {
        loom_errf(err, "%s takes no images (--image)", info.arch);
        return NULL;
    }
    image_processor proc;
    if (load_processor(&info, &proc, err)) return NULL;
    size_t each = (size_t)3 * info.image_size * info.image_size;
    float *all = mem_array((size_t)n, each * sizeof(float), "the pictures' pixels", err);
    for (int i = 0; all && i < n; i++) {
        size_t len = 0;
        char *bytes = file_read_all(files[i], &len, err);
        image img = {0};
        image_pixels px = {0};
        int rc = !bytes || image_decode(bytes, len, IMAGE_MAX_PIXELS_DEFAULT, &img, err) ||
                 image_process(&proc, &img, &px, err);
        if (!rc && (px.height != info.image_size || px.width != info.image_size))
            rc = loom_errf(err, "%s makes %d x %d pixel values, the vision tower takes %d x %d", proc.type, px.height,
                           px.width, info.image_size, info.image_size);
        if (!rc) memcpy(all + i * each, px.data, each * sizeof(float));
        free(bytes), image_free(&img), image_pixels_free(&px);
        if (rc) {
            loom_err_prefix(err, "--image %s", files[i]);
            free(all);
            return NULL;
        }
    }
    return all;
}

char *run_image_prompt(const loom_model *m, const char *prompt, int n_images, loom_err *err) {
    loom_model_info info;
    loom_model_get_info(m, &info);
    /* the special tokens' texts, detokenized with special tokens kept */
    char *boi = loom_detokenize(m, &info.image_begin, 1, false, err);
    char *tok = boi ? loom_detokenize(m, &info.image_token, 1, false, err) : NULL;
    char *eoi = tok ? loom_detokenize(m, &info.image_end, 1, false, err) : NULL;
    char *out = NULL;
    if (!eoi) goto done;
    int found = 0;
    for (const char *p = strstr(prompt, boi); p; p = strstr(p + strlen(boi), boi)) found++;
    if (found != n_images) {
        loom_errf(err, "the prompt holds %d picture placeholder%s (%s) for %d --image file%s: write %s where each goes",
                  found, found == 1 ? "" : "s", boi, n_images, n_images == 1 ? "" : "s", boi);
        goto done;
    }
    size_t seq = 4 + strlen(boi) + (size_t)info.image_tokens * strlen(tok) + strlen(eoi);
    out = mem_alloc(strlen(prompt) + (size_t)found * seq + 1, "the prompt", err);
    if (!out) goto done;
    char *o = out;
    const char *p = prompt, *at;
    for (; (at = strstr(p, boi)); p = at + strlen(boi)) {
        o += sprintf(o, "%.*s\n\n%s", (int)(at - p), p, boi);
        for (int t = 0; t < info.image_tokens; t++) o = stpcpy(o, tok);
        o += sprintf(o, "%s\n\n", eoi);
    }
    strcpy(o, p);
done:
    free(boi), free(tok), free(eoi);
    return out;
}
