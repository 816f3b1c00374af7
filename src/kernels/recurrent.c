/* The recurrent mixers' kernels: the causal convolution, Gated DeltaNet's gated delta rule and
 * Mamba-2's selective scan, each over a batch of sequences whose state lives between passes
 * (kernels.h). Both run in the recurrent form, one position after another, exactly as
 * transformers' decode path does; a sequence's state at a position is the same whichever pass
 * brought it there, which is what lets a prompt run in any chunking, and a snapshot taken after
 * a position resume it. The inner loops are the CPU variant's (cpu.h's delta_step, ssm_step
 * and conv_row). (The chunked form of GPU kernels turns the walk into matrix products for tensor
 * cores; on a CPU the walk's cost is its state's traffic, which delta_step keeps in L1 a block
 * of columns at a time, and the chunked form would add arithmetic and change the rounding.) */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#include "cpu/cpu.h"

/* Whether row r starts its sequence's run of rows in the batch. */
static bool run_starts(const int32_t *seq, int r) { return r == 0 || seq[r] != seq[r - 1]; }

/* The first row of row r's run, or r - back where the run began before that: a window of the
 * `back` rows before r needs to know no more (a long prefill would otherwise walk its whole run
 * for each row). */
static int run_start_within(const int32_t *seq, int r, int back) {
    int r0 = r;
    while (r0 > r - back && !run_starts(seq, r0)) r0--;
    return r0;
}

/* Where the state after row r goes, if the pass keeps a snapshot of it (NULL: nowhere). */
static float *snapshot_after(const state_snapshots *sn, const int32_t *seq, const int32_t *pos, int r, size_t stride) {
    if (!sn || !sn->n || (pos[r] + 1) % sn->interval) return NULL;
    for (int i = 0; i < sn->n; i++)
        if (sn->at[i].seq == seq[r] && sn->at[i].pos == pos[r] + 1) return sn->base + (size_t)sn->at[i].slot * stride;
    return NULL;
}

/* The kernel - 1 inputs up to row r of a run that starts at batch row r0 and position p0,
 * oldest first, into dst (rows of `channels`): rows of the batch, else of the state from before
 * the pass (h), zeros at position 0. dst may be h: its rows move down, each read before it is
 * overwritten. */
static void window_after(const conv_inputs *in, const int *c0, int channels, int r, int r0, int p0, const float *h,
                         const float *zeros, float *dst) {
    for (int j = 0; j < in->kernel - 1; j++) {
        int b = r + 1 - (in->kernel - 1) + j;
        for (int i = 0; i < in->n_in; i++) {
            float *to = dst + (size_t)j * channels + c0[i];
            const float *from = b >= r0 ? in->x[i] + (size_t)b * in->ldx[i]
                                : p0    ? h + (size_t)(j + r + 1 - r0) * channels + c0[i]
                                        : zeros;
            if (to != from) memmove(to, from, in->width[i] * sizeof *to);
        }
    }
}

/* The conv's taps transposed, tap-major ([kernel][channels]), so a row's channels are
 * consecutive in each tap, as they are in the inputs and the state. */
static _Thread_local fbuf taps_buf;

void conv1d_silu(const conv_inputs *in, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq,
                 float *state, size_t stride, const state_snapshots *snaps) {
    int k = in->kernel, hist = k - 1, channels = 0, c0[3];
    for (int i = 0; i < in->n_in; i++) c0[i] = channels, channels += in->width[i];
    float *taps = fbuf_get(&taps_buf, (size_t)k * channels + channels); /* and a row of zeros */
    if (!taps) return;
    float *zeros = taps + (size_t)k * channels;
    memset(zeros, 0, channels * sizeof *zeros);
    for (int i = 0; i < in->n_in; i++)
        for (int c = 0; c < in->width[i]; c++)
            for (int j = 0; j < k; j++) taps[(size_t)j * channels + c0[i] + c] = in->w[i][(size_t)c * in->ldw[i] + j];
                /* Every output row reads inputs only (the previous kernel - 1 of its sequence: rows of the
     * batch, else the state rows from before the pass, zeros at position 0), so rows run in
     * parallel; the state moves on after them. */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        int r0 = run_start_within(seq, r, hist);
        const float *h = state + (size_t)seq[r] * stride;
        for (int i = 0; i < in->n_in; i++) {
            const float *win[CONV_MAX_KERNEL];
            for (int j = 0; j <= hist; j++) {
                int b = r - hist + j; /* the batch row of window entry j, if in this run */
                win[j] = b >= r0   ? in->x[i] + (size_t)b * in->ldx[i]
                         : pos[r0] ? h + (size_t)(j + r - r0) * channels + c0[i]
                                   : zeros;
            }
            cpu()->conv_row(win, taps + c0[i], channels, k, in->bias[i], out + (size_t)r * ldo + c0[i], in->width[i]);
        }
    }
    /* each run's state, and each snapshot: its last kernel - 1 inputs after the row */
    for (int r = 0; r < rows; r++) {
        float *snap = snapshot_after(snaps, seq, pos, r, stride), *h = state + (size_t)seq[r] * stride;
        bool last = r + 1 == rows || run_starts(seq, r + 1);
        int r0 = run_start_within(seq, r, hist);
        if (snap) window_after(in, c0, channels, r, r0, pos[r0], h, zeros, snap);
        if (last) window_after(in, c0, channels, r, r0, pos[r0], h, zeros, h);
    }
}

/* log(1 + e^x), as torch's softplus (beta 1, linear past a threshold of 20). */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x / sqrt(sum(x^2) + 1e-6) * scale into out (transformers' l2norm, as FLA computes it). */
static void l2_normalise(const float *x, int n, float scale, float *out) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float s = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) out[i] = x[i] * s;
}

void gated_delta(const delta_shape *sh, const float *qkv, size_t ldq, const float *b, size_t ldb, const float *a,
                 size_t lda, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq, float *state,
                 size_t stride, const state_snapshots *snaps) {
    int kd = sh->k_dim, vd = sh->v_dim, group = sh->n_v_heads / sh->n_k_heads;
    size_t k_col = (size_t)sh->n_k_heads * kd, v_col = 2 * k_col, per_head = (size_t)kd * vd;
    float q_scale = 1.0f / sqrtf((float)kd);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < sh->n_v_heads; h++) {
        int kh = h / group;
        float q[DELTA_MAX_DIM], k[DELTA_MAX_DIM];
        float *S = NULL;
        float A = -expf(sh->a_log[h]);
        for (int r = 0; r < rows; r++) {
            const float *row = qkv + (size_t)r * ldq;
            if (run_starts(seq, r)) {
                S = state + (size_t)seq[r] * stride + h * per_head;
                if (!pos[r]) memset(S, 0, per_head * sizeof *S);
            }
            l2_normalise(row + (size_t)kh * kd, kd, q_scale, q);
            l2_normalise(row + k_col + (size_t)kh * kd, kd, 1.0f, k);
            float decay = expf(A * softplus(a[(size_t)r * lda + h] + sh->dt_bias[h]));
            float beta = 1.0f / (1.0f + expf(-b[(size_t)r * ldb + h]));
            cpu()->delta_step(S, kd, vd, decay, beta, k, row + v_col + (size_t)h * vd, q,
                              out + (size_t)r * ldo + (size_t)h * vd);
            float *snap = snapshot_after(snaps, seq, pos, r, stride);
            if (snap) memcpy(snap + h * per_head, S, per_head * sizeof *S);
        }
    }
}

void ssm_scan(const ssm_shape *sh, const float *xbc, size_t ldx, const float *dt, size_t ldt, float *out, size_t ldo,
              int rows, const int32_t *pos, const int32_t *seq, float *state, size_t stride,
              const state_snapshots *snaps) {
    int hd = sh->head_dim, ds = sh->d_state, per = sh->n_heads / sh->n_groups;
    size_t b_col = (size_t)sh->n_heads * hd, c_col = b_col + (size_t)sh->n_groups * ds, per_head = (size_t)hd * ds;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < sh->n_heads; h++) {
        float *S = NULL, A = -expf(sh->a_log[h]);
        for (int r = 0; r < rows; r++) {
            const float *row = xbc + (size_t)r * ldx, *x = row + (size_t)h * hd;
            const float *B = row + b_col + (size_t)(h / per) * ds, *C = row + c_col + (size_t)(h / per) * ds;
            if (run_starts(seq, r)) {
                S = state + (size_t)seq[r] * stride + h * per_head;
                if (!pos[r]) memset(S, 0, per_head * sizeof *S);
            }
            /* transformers' selective_state_update: S = S exp(step A) + (step B) x; y = S C + D x */
            float step = softplus(dt[(size_t)r * ldt + h] + sh->dt_bias[h]);
            step = fminf(fmaxf(step, sh->dt_min), sh->dt_max);
            cpu()->ssm_step(S, hd, ds, expf(step * A), step, x, B, C, sh->d[h], out + (size_t)r * ldo + (size_t)h * hd);
            float *snap = snapshot_after(snaps, seq, pos, r, stride);
            if (snap) memcpy(snap + h * per_head, S, per_head * sizeof *S);
        }
    }
}
