/* Whether OpenBLAS's sgemm gives a row the same bits whatever the call's row count: each row of
 * a 64 x 64 x 64 product (x w^T, as loom's attention called it) alone, then in calls of m rows,
 * counting the elements whose bits differ. Prints the core OpenBLAS chose (openblas_get_corename):
 * OPENBLAS_CORETYPE changes it. Built and run by benches/blas-rows.sh. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64
#define K 64
#define M 64

int main(void) {
    float *x = malloc(M * K * sizeof *x), *w = malloc(N * K * sizeof *w);
    float *alone = malloc(M * N * sizeof *alone), *y = malloc(M * N * sizeof *y);
    unsigned s = 1;
    for (int i = 0; i < M * K; i++) x[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (1u << 24) - 0.5f;
    for (int i = 0; i < N * K; i++) w[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (1u << 24) - 0.5f;
    printf("OpenBLAS core: %s (%s)\n", openblas_get_corename(), openblas_get_config());
    for (int r = 0; r < M; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, N, K, 1.0f, x + r * K, K, w, K, 0.0f, alone + r * N, N);
    static const int rows[] = {1, 2, 3, 4, 8, 16, 17, 32, 64};
    for (size_t t = 0; t < sizeof rows / sizeof *rows; t++) {
        int m = rows[t], cover = M / m * m, differ = 0;
        for (int r0 = 0; r0 + m <= M; r0 += m)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, N, K, 1.0f, x + r0 * K, K, w, K, 0.0f, y + r0 * N,
                        N);
        for (int i = 0; i < cover * N; i++) differ += memcmp(&y[i], &alone[i], sizeof *y) != 0;
        printf("calls of %2d rows: %4d of %4d elements differ from the rows computed alone\n", m, differ, cover * N);
    }
    free(x), free(w), free(alone), free(y);
    return 0;
}
