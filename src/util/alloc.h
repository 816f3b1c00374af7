/* Memory allocation: the library's one policy (alloc.c). Every heap allocation goes through
 * these helpers. A failure is never fatal: the helper returns NULL (or -1) and, when err is
 * non-NULL, says "cannot allocate N bytes for WHAT", and the caller returns its own failure
 * (loom_err and -1 or NULL) as it does for any other error. Sizes that multiply are checked
 * for overflow here, once. Arrays grow through mem_reserve / ARRAY_RESERVE only. */
#ifndef LOOM_UTIL_ALLOC_H
#define LOOM_UTIL_ALLOC_H
#include <stddef.h>

#include "loom.h"

/* malloc(bytes); a zero-byte request gets a valid (freeable) pointer too. */
void *mem_alloc(size_t bytes, const char *what, loom_err *err);
/* malloc(n * size), the product checked for overflow. */
void *mem_array(size_t n, size_t size, const char *what, loom_err *err);
/* calloc(n, size), the product checked for overflow. */
void *mem_zalloc(size_t n, size_t size, const char *what, loom_err *err);
/* 64-byte aligned (aligned_alloc, the size rounded up to a multiple of 64); free with free(). */
void *mem_aligned(size_t bytes, const char *what, loom_err *err);
/* The same on `align` bytes (a power of two, at least 64: 2 MiB for huge pages). */
void *mem_aligned_to(size_t align, size_t bytes, const char *what, loom_err *err);
/* Copies of a string, and of its first n bytes at most (strdup, strndup). */
char *mem_strdup(const char *s, const char *what, loom_err *err);
char *mem_strndup(const char *s, size_t n, const char *what, loom_err *err);

/* Makes room for `need` elements of `elem` bytes in the malloc'd array *arrp (NULL when cap is
 * 0) of capacity *cap: the capacity doubles from 16 until it holds need. Returns 0, or -1 with
 * the array and *cap untouched. The array is passed by address and handled through memcpy, so
 * arrays of any element type share it: use ARRAY_RESERVE. */
int mem_reserve(void *arrp, size_t *cap, size_t need, size_t elem, const char *what, loom_err *err);
#define ARRAY_RESERVE(arr, cap, need, what, err) mem_reserve(&(arr), &(cap), (need), sizeof *(arr), (what), (err))

#endif
