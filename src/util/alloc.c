/* Memory allocation (see alloc.h): the only file of the library that calls malloc, calloc,
 * realloc, aligned_alloc or strdup. It owns the policy: no allocation failure ends the process
 * or goes unchecked; each is reported as "cannot allocate N bytes for WHAT" and returned to the
 * caller, which fails the way it fails for any other error; multiplied sizes and capacities are
 * checked for overflow here rather than at each call. */
#include "util/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* "cannot allocate 1234 bytes for the KV cache", with MiB or GiB beside large sizes. */
static void *no_memory(size_t bytes, const char *what, loom_err *err) {
    const double mib = 1024.0 * 1024.0;
    if (bytes >= ((size_t)1 << 30))
        loom_errf(err, "cannot allocate %zu bytes (%.1f GiB) for %s", bytes, bytes / (mib * 1024.0), what);
    else if (bytes >= ((size_t)1 << 20))
        loom_errf(err, "cannot allocate %zu bytes (%.1f MiB) for %s", bytes, bytes / mib, what);
    else loom_errf(err, "cannot allocate %zu bytes for %s", bytes, what);
    return NULL;
}

static void *overflow(size_t n, size_t size, const char *what, loom_err *err) {
    loom_errf(err, "cannot allocate %zu x %zu bytes for %s: the size overflows", n, size, what);
    return NULL;
}

void *mem_alloc(size_t bytes, const char *what, loom_err *err) {
    void *p = malloc(bytes ? bytes : 1);
    return p ? p : no_memory(bytes, what, err);
}

void *mem_array(size_t n, size_t size, const char *what, loom_err *err) {
    if (size && n > SIZE_MAX / size) return overflow(n, size, what, err);
    return mem_alloc(n * size, what, err);
}

void *mem_zalloc(size_t n, size_t size, const char *what, loom_err *err) {
    if (size && n > SIZE_MAX / size) return overflow(n, size, what, err);
    void *p = calloc(n && size ? n : 1, n && size ? size : 1);
    return p ? p : no_memory(n * size, what, err);
}

void *mem_aligned(size_t bytes, const char *what, loom_err *err) { return mem_aligned_to(64, bytes, what, err); }

void *mem_aligned_to(size_t align, size_t bytes, const char *what, loom_err *err) {
    if (bytes > SIZE_MAX - (align - 1)) {
        loom_errf(err, "cannot allocate %zu bytes on %zu-byte boundaries for %s: the size overflows", bytes, align,
                  what);
        return NULL;
    }
    size_t rounded = bytes ? (bytes + align - 1) / align * align : align;
    void *p = aligned_alloc(align, rounded);
    return p ? p : no_memory(rounded, what, err);
}

char *mem_strdup(const char *s, const char *what, loom_err *err) { return mem_strndup(s, SIZE_MAX, what, err); }

char *mem_strndup(const char *s, size_t n, const char *what, loom_err *err) {
    size_t len = strnlen(s, n);
    char *p = mem_alloc(len + 1, what, err);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

int mem_reserve(void *arrp, size_t *cap, size_t need, size_t elem, const char *what, loom_err *err) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c = c > SIZE_MAX / 2 ? need : 2 * c;
    if (elem && c > SIZE_MAX / elem) c = need; /* the doubling overflows: exactly what is needed */
    if (elem && c > SIZE_MAX / elem) {
        overflow(c, elem, what, err);
        return -1;
    }
    size_t bytes = c * elem;
    void *old;
    memcpy(&old, arrp, sizeof old);
    void *p = realloc(old, bytes ? bytes : 1);
    if (!p) {
        no_memory(bytes, what, err);
        return -1;
    }
    memcpy(arrp, &p, sizeof p);
    *cap = c;
    return 0;
}
