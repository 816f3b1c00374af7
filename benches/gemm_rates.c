/* GEMM rates for a prefill-shaped product (512 x 2048 times 2048 x 2048, the 1B shape's
 * q_proj at 512 tokens): OpenBLAS sgemm as loom calls it, and oneDNN's matmul in f32, bf16
 * (rounded activations) and u8 x s8 (quantized activations), its weights in the layout it
 * prefers. Not part of loom: it measures what another GEMM backend would give its prefill
 * (benches/gemm-rates.sh builds and runs it). */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { printf("%s: %d\n", #x, s_); exit(1); } } while (0)

static double run_dnnl(dnnl_engine_t eng, dnnl_stream_t st, int M, int K, int N, dnnl_data_type_t at, dnnl_data_type_t wt, int reps) {
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    CHK(dnnl_memory_desc_init_by_tag(&a, 2, ad, at, dnnl_ab));
    CHK(dnnl_memory_desc_init_by_tag(&b, 2, bd, wt, dnnl_format_tag_any));
    CHK(dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    CHK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success) { printf("no primitive\n"); return 0; }
    const char *impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *bq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t p; CHK(dnnl_primitive_create(&p, pd));
    dnnl_memory_t am, bm, cm;
    CHK(dnnl_memory_create(&am, &a, eng, DNNL_MEMORY_ALLOCATE));
    CHK(dnnl_memory_create(&bm, bq, eng, DNNL_MEMORY_ALLOCATE));
    CHK(dnnl_memory_create(&cm, &c, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    CHK(dnnl_primitive_execute(p, st, 3, args)); dnnl_stream_wait(st);
    double t0 = omp_get_wtime();
    for (int i = 0; i < reps; i++) CHK(dnnl_primitive_execute(p, st, 3, args));
    dnnl_stream_wait(st);
    double t = (omp_get_wtime() - t0) / reps;
    printf("  impl %s\n", impl);
    return 2.0 * M * K * N / t / 1e9;
}

int main(void) {
    int M = 512, K = 2048, N = 2048, reps = 10;
    float *A = calloc((size_t)M * K, 4), *B = calloc((size_t)K * N, 4), *C = calloc((size_t)M * N, 4);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A, K, B, K, 0, C, N);
    double t0 = omp_get_wtime();
    for (int i = 0; i < reps; i++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A, K, B, K, 0, C, N);
    printf("OpenBLAS sgemm: %.1f GFLOP/s\n", 2.0 * M * K * N / ((omp_get_wtime() - t0) / reps) / 1e9);
    dnnl_engine_t eng; dnnl_stream_t st;
    CHK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CHK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    printf("oneDNN f32: %.1f GFLOP/s\n", run_dnnl(eng, st, M, K, N, dnnl_f32, dnnl_f32, reps));
    printf("oneDNN bf16: %.1f GFLOP/s\n", run_dnnl(eng, st, M, K, N, dnnl_bf16, dnnl_bf16, reps));
    printf("oneDNN u8 x s8: %.1f GOP/s\n", run_dnnl(eng, st, M, K, N, dnnl_u8, dnnl_s8, reps));
    return 0;
}
