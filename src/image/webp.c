/* WebP through libwebp's animation decoder, as Pillow reads every WebP file: the first frame of
 * the canvas in non-premultiplied RGBA, its alpha then dropped (Pillow's `convert("RGB")`). A
 * still file is one frame covering the canvas. The EXIF chunk gives the orientation. */
#include <stdlib.h>
#include <string.h>

#include <webp/demux.h>

#include "image/image.h"
#include "util/alloc.h"
#include "util/err.h"

static int webp_orientation(const uint8_t *data, size_t size) {
    WebPData wd = {data, size};
    WebPDemuxer *dmux = WebPDemux(&wd);
    int o = 1;
    WebPChunkIterator it;
    if (dmux && WebPDemuxGetChunk(dmux, "EXIF", 1, &it)) {
        o = exif_orientation(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    WebPDemuxDelete(dmux);
    return o;
}

int image_decode_webp(const uint8_t *data, size_t size, int64_t max_pixels, image *out, int *orientation,
                      loom_err *err) {
    memset(out, 0, sizeof *out);
    *orientation = 1;
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK)
        return loom_errf(err, "WebP: not a valid WebP file (or truncated)");
    if (image_check_size("WebP", f.width, f.height, max_pixels, err) < 0) return -1;
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return loom_errf(err, "WebP: cannot set up the decoder");
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPData wd = {data, size};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &opt);
    if (!dec) return loom_errf(err, "WebP: not a valid WebP file (or truncated)");
    WebPAnimInfo info;
    uint8_t *rgba = NULL;
    int ts = 0, rc = -1;
    if (!WebPAnimDecoderGetInfo(dec, &info) || !WebPAnimDecoderGetNext(dec, &rgba, &ts)) {
        loom_errf(err, "WebP: the image data cannot be decoded (corrupt or truncated)");
        goto done;
    }
    /* the canvas is what the header promised, checked above; the frame never exceeds it */
    if (image_check_size("WebP", info.canvas_width, info.canvas_height, max_pixels, err) < 0) goto done;
    size_t n = (size_t)info.canvas_width * info.canvas_height;
    out->rgb = mem_array(n, 3, "WebP pixels", err);
    if (!out->rgb) goto done;
    for (size_t i = 0; i < n; i++) memcpy(out->rgb + 3 * i, rgba + 4 * i, 3);
    out->width = (int)info.canvas_width;
    out->height = (int)info.canvas_height;
    *orientation = webp_orientation(data, size);
    rc = 0;
done:
    WebPAnimDecoderDelete(dec);
    return rc;
}
