/* The converters' text buffer (see grammar.h): appends that remember running out of memory, so
 * a converter checks once at the end instead of after every piece. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/alloc.h"

void gbuf_put(gbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (ARRAY_RESERVE(b->p, b->cap, b->len + n + 1, "grammar text", NULL)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void gbuf_puts(gbuf *b, const char *s) { gbuf_put(b, s, strlen(s)); }

void gbuf_printf(gbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        gbuf_put(b, small, (size_t)n);
        return;
    }
    char *big = mem_alloc((size_t)n + 1, "a grammar's text", NULL);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gbuf_put(b, big, (size_t)n);
    free(big);
}

void gbuf_literal(gbuf *b, const char *s, size_t n) {
    gbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') gbuf_printf(b, "\\%c", c);
        else if (c == '\n') gbuf_puts(b, "\\n");
        else if (c == '\r') gbuf_puts(b, "\\r");
        else if (c == '\t') gbuf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) gbuf_printf(b, "\\x%02X", c);
        else gbuf_put(b, (const char *)&c, 1); /* UTF-8 passes through as itself */
    }
    gbuf_put(b, "\"", 1);
}

void gbuf_free(gbuf *b) {
    free(b->p);
    *b = (gbuf){0};
}
