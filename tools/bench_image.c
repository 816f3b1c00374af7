/* `loom bench image`: what a picture costs a vision-language model before its prompt's prefill.
 * The model's vision tower and projector encode a picture of its image_size (random pixels in
 * [-1, 1], as a processor's are; the cost does not depend on them) --num-iters times after
 * --num-iters-warmup, on every rank as the engine runs them (sharded by heads and MLP features
 * over -tp ranks, or whole on each with --mm-encoder-tp-mode data). Reports seconds a picture (mean and
 * percentiles, the slowest rank's), patches a second and the tower's GFLOP/s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "runtime/engine.h"
#include "util/alloc.h"

typedef struct image_opts {
    cli_common c;
    int warmup, iters;
    loom_engine_options eo;
    loom_model *m;
} image_opts;

/* The tower's multiply-adds for one picture, times 2: patches, per layer q/k/v/o, the MLP and
 * the attention's two products, then the projection. */
static double tower_flop(const vision_config *v, int text_hidden) {
    double n = pow(v->image_size / v->patch_size, 2), d = v->hidden, pp = 3.0 * v->patch_size * v->patch_size;
    double layer = n * (4 * d * d + 2 * d * v->intermediate) + 2 * n * n * d;
    return 2 * (n * pp * d + v->n_layers * layer + (double)v->tokens_per_image * d * text_hidden);
}

static int image_rank(loom_comm *comm, void *arg) {
    image_opts *o = arg;
    loom_engine_options eo = o->eo;
    eo.comm = comm;
    loom_engine *e = cli_rank_engine("bench image", comm, o->m, &eo);
    if (!e) return 1;
    const vision_config *v = &o->m->cfg.vision;
    size_t npx = (size_t)3 * v->image_size * v->image_size;
    float *px = mem_array(npx, sizeof *px, "pixels", NULL);
    float *feat = mem_array((size_t)v->tokens_per_image * o->m->cfg.hidden, sizeof *feat, "features", NULL);
    double *secs = mem_array((size_t)o->iters, sizeof *secs, "timings", NULL);
    int n = loom_comm_size(comm);
    float *all = mem_array((size_t)n, sizeof *all, "the ranks' timings", NULL);
    loom_err err = {{0}};
    int rc = px && feat && secs && all ? 0 : 1;
    uint64_t s = 47;
    for (size_t i = 0; !rc && i < npx; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        px[i] = (float)((s >> 40) * (2.0 / (1 << 24)) - 1.0);
    }
    for (int it = 0; !rc && it < o->warmup + o->iters; it++) {
        double t0 = cli_now();
        rc = loom_encode_image(e, px, feat, &err);
        double t = cli_now() - t0;
        /* the slowest rank's time: the prefill waits for every rank's rows */
        float mine = (float)t;
        if (!rc && loom_comm_all_gather(comm, &mine, 1, all, &err)) rc = -1;
        for (int r = 0; !rc && r < n; r++) t = all[r] > t ? all[r] : t;
        if (!rc && it >= o->warmup) secs[it - o->warmup] = t;
    }
    if (rc) cli_rank_error("bench image", comm, &err);
    else if (loom_comm_rank(comm) == 0) {
        double sum = 0;
        for (int i = 0; i < o->iters; i++) sum += secs[i];
        qsort(secs, (size_t)o->iters, sizeof *secs, cli_by_double);
        double mean = sum / o->iters, patches = pow(v->image_size / v->patch_size, 2);
        printf("vision tower: %d x %d px, %.0f patches, %d layers of %d, %d tokens a picture; %d rank%s (%s)\n",
               v->image_size, v->image_size, patches, v->n_layers, v->hidden, v->tokens_per_image, loom_comm_size(comm),
               loom_comm_size(comm) > 1 ? "s" : "", e->vision->tp > 1 ? "sharded by heads and MLP features" : "whole");
        printf("encode: mean %.3f s a picture, p50 %.3f, p90 %.3f (%d iterations); %.0f patches/s, %.1f GFLOP/s\n",
               mean, secs[o->iters / 2], secs[(int)(o->iters * 0.9)], o->iters, patches / mean,
               tower_flop(v, o->m->cfg.hidden) / mean / 1e9);
    }
    free(px), free(feat), free(secs), free(all);
    loom_engine_free(e);
    return rc ? 1 : 0;
}

int bench_image(int argc, char **argv) {
    image_opts o = {.c = CLI_COMMON_DEFAULTS, .warmup = 1, .iters = 5};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&o.c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(a, "--num-iters-warmup")) o.warmup = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--num-iters")) o.iters = (int)cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else {
            fprintf(stderr, "loom bench image: unknown option '%s'\n", a);
            return 2;
        }
    }
    loom_model *m = o.m = cli_load_model(&o.c, false);
    if (!m) return 1;
    int rc = 1;
    if (!m->cfg.vision.kind) fprintf(stderr, "loom bench image: %s takes no images\n", m->cfg.arch);
    else {
        o.eo = cli_engine_options(&o.c);
        o.eo.max_seqs = 1, o.eo.max_ctx = 64, o.eo.max_tokens = 64;
        rc = cli_launch(&o.c, m, &o.eo, 0, image_rank, &o);
    }
    cli_free(&o.c, m);
    return rc;
}
