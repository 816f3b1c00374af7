/* Memory, errors and work limits of one parse or render: a chunked bump arena freed all at
 * once, failures that unwind to the entry point, and the step budget. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_impl.h"
#include "util/alloc.h"
#include "util/utf8.h"

struct chunk {
    chunk *prev;
    max_align_t data[];
};

#define CHUNK_MIN (64u << 10)

void *talloc(tctx *c, size_t n) {
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (n > c->left) {
        if (n > TMPL_MAX_MEMORY || c->used + n > TMPL_MAX_MEMORY)
            tfail(c, 0, "more than %u MiB of working memory", TMPL_MAX_MEMORY >> 20);
        size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
        loom_err why;
        chunk *k = mem_alloc(sizeof *k + size, "the template's working memory", &why);
        if (!k) tfail(c, 0, "%s", why.msg);
        k->prev = c->chunks;
        c->chunks = k;
        c->next = (char *)k->data;
        c->left = size;
    }
    void *p = c->next;
    c->next += n;
    c->left -= n;
    c->used += n;
    return p;
}

void tfree_all(tctx *c) {
    while (c->chunks) {
        chunk *k = c->chunks;
        c->chunks = k->prev;
        free(k);
    }
    c->left = 0;
}

_Noreturn void tfail(tctx *c, int line, const char *fmt, ...) {
    if (c->err) {
        char msg[360];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (line > 0)
            snprintf(c->err->msg, sizeof c->err->msg, "chat template %.100s: line %d: %s", c->name, line, msg);
        else snprintf(c->err->msg, sizeof c->err->msg, "chat template %.100s: %s", c->name, msg);
    }
    longjmp(*c->jb, 1);
}

void tstep(tctx *c, int line) {
    if (++c->steps > TMPL_MAX_STEPS) tfail(c, line, "more than %ld evaluation steps", TMPL_MAX_STEPS);
}

void tb_put(tctx *c, tbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > TMPL_MAX_MEMORY) tfail(c, 0, "more than %u MiB of working memory", TMPL_MAX_MEMORY >> 20);
            cap *= 2;
        }
        char *p = talloc(c, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tb_putc(tctx *c, tbuf *b, char ch) { tb_put(c, b, &ch, 1); }

void tb_printf(tctx *c, tbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    tb_put(c, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void tb_putcp(tctx *c, tbuf *b, uint32_t cp) {
    char tmp[4];
    if (cp < 0x10000) {
        tb_put(c, b, tmp, u8encode(cp, tmp));
        return;
    }
    tmp[0] = (char)(0xF0 | cp >> 18);
    tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    tmp[3] = (char)(0x80 | (cp & 0x3F));
    tb_put(c, b, tmp, 4);
}

char *tstrndup(tctx *c, const char *s, size_t n) {
    char *p = talloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

uint32_t u8next(const char *s, size_t *i) {
    size_t len;
    uint32_t cp = u8decode(s + *i, &len);
    *i += len;
    return cp;
}

bool u8valid(const char *s, size_t n) { return u8invalid(s, n) == n; }

size_t u8count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((uint8_t)s[i] & 0xC0) != 0x80;
    return k;
}

bool py_isspace(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
