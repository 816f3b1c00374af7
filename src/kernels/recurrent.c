/* The recurrent mixers' kernels: the causal convolution, Gated DeltaNet's gated delta rule and
 * Mamba-2's selective scan, each over a batch of sequences whose state lives between passes
 * (kernels.h). Both run in
 * the recurrent form, one position after another, exactly as transformers' decode path does;
 * a sequence's state at a position is the same whichever pass brought it there, which is what
 * lets a prompt run in any chunking, and a snapshot taken after a position resume it. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Whether row r starts its sequence's run of rows in the batch. */
static bool run_starts(const int32_t *seq, int r) { return r == 0 || seq[r] != seq[r - 1]; }

/* Where the state after row r goes, if the pass keeps a snapshot of it (NULL: nowhere). */
static float *snapshot_after(const state_snapshots *sn, const int32_t *seq, const int32_t *pos, int r, size_t stride) {
    if (!sn || !sn->n || (pos[r] + 1) % sn->interval) return NULL;
    for (int i = 0; i < sn->n; i++)
        if (sn->at[i].seq == seq[r] && sn->at[i].pos == pos[r] + 1) return sn->base + (size_t)sn->at[i].slot * stride;
    return NULL;
}

void conv1d_silu(const conv_inputs *in, float *out, size_t ldo, int rows, const int32_t *pos, const int32_t *seq,
                 float *state, size_t stride, const state_snapshots *snaps) {
    int k = in->kernel, hist = k - 1, channels = 0;
    for (int i = 0; i < in->n_in; i++) channels += in->width[i];
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < channels; ch++) {
        int i = 0, c = ch;
        while (c >= in->width[i]) c -= in->width[i++];
        const float *w = in->w[i] + (size_t)c * in->ldw[i];
        float win[CONV_MAX_KERNEL];
        float *h = NULL; /* this channel's history in the current sequence's state */
        for (int r = 0; r < rows; r++) {
            if (run_starts(seq, r)) {
                h = state + (size_t)seq[r] * stride;
                for (int j = 0; j < hist; j++) win[j] = pos[r] ? h[(size_t)j * channels + ch] : 0.0f;
            }
            win[hist] = in->x[i][(size_t)r * in->ldx[i] + c];
            float acc = in->bias[i] ? in->bias[i][c] : 0;
            for (int j = 0; j < k; j++) acc += w[j] * win[j];
            out[(size_t)r * ldo + ch] = silu(acc);
            memmove(win, win + 1, hist * sizeof *win);
            float *snap = snapshot_after(snaps, seq, pos, r, stride);
            for (int j = 0; snap && j < hist; j++) snap[(size_t)j * channels + ch] = win[j];
            if (r + 1 == rows || run_starts(seq, r + 1))
                for (int j = 0; j < hist; j++) h[(size_t)j * channels + ch] = win[j];
        }
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
        float q[DELTA_MAX_DIM], k[DELTA_MAX_DIM], delta[DELTA_MAX_DIM];
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
            const float *v = row + v_col + (size_t)h * vd;
            float decay = expf(A * softplus(a[(size_t)r * lda + h] + sh->dt_bias[h]));
            float beta = 1.0f / (1.0f + expf(-b[(size_t)r * ldb + h]));
            /* S *= decay; delta = (v - S^T k) * beta; S += k delta^T; out = S^T q */
            for (int j = 0; j < vd; j++) delta[j] = 0;
            for (int i = 0; i < kd; i++) {
                float *Si = S + (size_t)i * vd;
                for (int j = 0; j < vd; j++) {
                    Si[j] *= decay;
                    delta[j] += Si[j] * k[i];
                }
            }
            for (int j = 0; j < vd; j++) delta[j] = (v[j] - delta[j]) * beta;
            float *o = out + (size_t)r * ldo + (size_t)h * vd;
            for (int j = 0; j < vd; j++) o[j] = 0;
            for (int i = 0; i < kd; i++) {
                float *Si = S + (size_t)i * vd;
                for (int j = 0; j < vd; j++) {
                    Si[j] += k[i] * delta[j];
                    o[j] += Si[j] * q[i];
                }
            }
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
            float decay = expf(step * A);
            float *y = out + (size_t)r * ldo + (size_t)h * hd;
            for (int p = 0; p < hd; p++) {
                float *Sp = S + (size_t)p * ds, acc = 0;
                for (int n = 0; n < ds; n++) {
                    Sp[n] = Sp[n] * decay + step * B[n] * x[p];
                    acc += Sp[n] * C[n];
                }
                y[p] = acc + x[p] * sh->d[h];
            }
            float *snap = snapshot_after(snaps, seq, pos, r, stride);
            if (snap) memcpy(snap + h * per_head, S, per_head * sizeof *S);
        }
    }
}
