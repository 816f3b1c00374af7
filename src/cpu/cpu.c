/* Choosing the CPU variant: the list of variants this architecture is built with, best first,
 * each with the test of what the CPU must report to run it; the LOOM_CPU override; the CPU's
 * model name and the GEMM libraries' own choice of kernels, for reports. */
#include "cpu/cpu.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#elif defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "util/err.h"

#if defined(LOOM_DNNL)
#include <dnnl.h>
#include <dnnl_debug.h>
#endif

extern const cpu_kernels cpu_generic;
#if defined(LOOM_CPU_GENERIC_ONLY) /* a build of the generic variant alone (CMakeLists.txt) */
#elif defined(__x86_64__)
extern const cpu_kernels cpu_avx2, cpu_avx2vnni, cpu_avx512, cpu_avx512bf16, cpu_avx512amx;
/* libgcc's checks include the OS's consent (XCR0) to save the wider registers. Every CPU with
 * AVX2 has F16C (GGUF's f16 scales, gguf_blocks.h's gguf_f16); it is checked all the same. */
static bool has_f16c_fma(void) { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"); }
static bool has_avx512(void) { return __builtin_cpu_supports("avx512f") && has_f16c_fma(); }
static bool has_avx512bf16(void) {
    return has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
}
static bool has_avx2(void) { return __builtin_cpu_supports("avx2") && has_f16c_fma(); }
/* AVX-VNNI is cpuid leaf 7, subleaf 1, EAX bit 4 (clang 14's __builtin_cpu_supports does not
 * know it); its registers are AVX2's, whose OS support has_avx2 checked */
static bool has_avx2vnni(void) {
    unsigned a, b, c, d;
    return has_avx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
/* AMX: the tile and int8 units (cpuid leaf 7 EDX bits 24 and 25), the OS's saving of the tile
 * state (XCR0 bits 17 and 18), and Linux's consent for this process to use the 8 KiB of tile
 * data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16 and later), without
 * which the first tile instruction ends it with SIGILL. */
static bool has_avx512amx(void) {
    unsigned a, b, c, d;
    if (!has_avx512bf16() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d >> 24 & 3) != 3) return false;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#elif defined(__aarch64__)
extern const cpu_kernels cpu_neon, cpu_neondot;
static bool has_neon(void) { return getauxval(AT_HWCAP) & HWCAP_ASIMD; }
static bool has_neondot(void) { return has_neon() && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP); }
#endif
static bool always(void) { return true; }

static const struct variant {
    const cpu_kernels *k;
    bool (*runs)(void);
} variants[] = {
#if defined(LOOM_CPU_GENERIC_ONLY)
#elif defined(__x86_64__)
    {&cpu_avx512amx, has_avx512amx}, {&cpu_avx512bf16, has_avx512bf16},
    {&cpu_avx512, has_avx512},       {&cpu_avx2vnni, has_avx2vnni},
    {&cpu_avx2, has_avx2},
#elif defined(__aarch64__)
    {&cpu_neondot, has_neondot},
    {&cpu_neon, has_neon},
#endif
    {&cpu_generic, always},
};
#define N_VARIANTS (int)(sizeof variants / sizeof *variants)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cpu_kernels *chosen;
static loom_err choose_err;

static void list_variants(char *buf, size_t cap, bool runnable_only) {
    buf[0] = 0;
    for (int i = 0; i < N_VARIANTS; i++)
        if (!runnable_only || variants[i].runs())
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? " " : "", variants[i].k->name);
}

static void choose(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
#endif
    const char *want = getenv("LOOM_CPU");
    if (!want || !*want) {
        for (int i = 0; i < N_VARIANTS && !chosen; i++)
            if (variants[i].runs()) chosen = variants[i].k;
        return;
    }
    char built[128], runnable[128];
    list_variants(built, sizeof built, false);
    list_variants(runnable, sizeof runnable, true);
    for (int i = 0; i < N_VARIANTS; i++) {
        if (strcmp(want, variants[i].k->name)) continue;
        if (variants[i].runs()) chosen = variants[i].k;
        else loom_errf(&choose_err, "LOOM_CPU=%s: this CPU cannot run it (it runs: %s)", want, runnable);
        return;
    }
    loom_errf(&choose_err, "LOOM_CPU=%s: unknown variant (this build has: %s)", want, built);
}

int cpu_init(loom_err *err) {
    pthread_once(&once, choose);
    if (chosen) return 0;
    if (err) *err = choose_err;
    return -1;
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;

static void warn_fallback(void) { fprintf(stderr, "loom: %s; running the generic kernels\n", choose_err.msg); }

/* A kernel cannot fail, and a library must not end its process, so a failed choice (an unusable
 * LOOM_CPU) is not fatal here: the generic variant, which every CPU runs, takes its place after
 * one warning. It is not recorded as the choice: cpu_init keeps reporting the failure, and
 * loom_model_load and loom_cpu_get_info, which call it first, refuse to go on, so only a caller
 * that skipped them ever runs on the fallback. */
const cpu_kernels *cpu(void) {
    pthread_once(&once, choose);
    if (chosen) return chosen;
    pthread_once(&warn_once, warn_fallback);
    return &cpu_generic;
}

/* "model name" on x86, with the family and model numbers (a virtual machine may report only a
 * brand, as "AMD EPYC"); aarch64 kernels report the implementer and part numbers instead */
static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256], name[128] = "", family[16] = "", model[16] = "", impl[32] = "", part[32] = "";
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '\n' && (name[0] || impl[0])) break; /* the first processor's block is enough */
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + strspn(colon + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        *colon = 0;
        char *key = line;
        key[strcspn(key, "\t")] = 0;
        if (!strcmp(key, "model name")) snprintf(name, sizeof name, "%s", v);
        else if (!strcmp(key, "cpu family")) snprintf(family, sizeof family, "%s", v);
        else if (!strcmp(key, "model")) snprintf(model, sizeof model, "%s", v);
        else if (!strcmp(key, "CPU implementer")) snprintf(impl, sizeof impl, "%s", v);
        else if (!strcmp(key, "CPU part")) snprintf(part, sizeof part, "%s", v);
    }
    fclose(f);
    if (name[0] && family[0]) snprintf(out, cap, "%s (family %s, model %s)", name, family, model);
    else if (name[0]) snprintf(out, cap, "%s", name);
    else if (impl[0]) snprintf(out, cap, "aarch64 (implementer %s, part %s)", impl, part);
}

/* The kernels OpenBLAS and oneDNN picked for this CPU by themselves (OPENBLAS_CORETYPE and
 * ONEDNN_MAX_CPU_ISA change them): what a report of a product's bits must name beside the
 * variant, since inside those libraries the order of a sum is theirs. */
static void gemm_libraries(char *out, size_t cap) {
    int n = snprintf(out, cap, "OpenBLAS %s", openblas_get_corename());
#if defined(LOOM_DNNL)
    if (n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - n, ", oneDNN %s", dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
#else
    (void)n;
#endif
}

int loom_cpu_get_info(loom_cpu_info *info, loom_err *err) {
    memset(info, 0, sizeof *info);
    cpu_model(info->model, sizeof info->model);
    gemm_libraries(info->gemm, sizeof info->gemm);
    pthread_once(&once, choose); /* __builtin_cpu_init before the runs() tests */
    list_variants(info->runnable, sizeof info->runnable, true);
    if (cpu_init(err)) return -1;
    info->variant = chosen->name;
    return 0;
}
