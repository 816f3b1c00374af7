/* The lexer: template source to tokens, following jinja2/lexer.py with transformers' settings
 * (trim_blocks, lstrip_blocks, keep_trailing_newline off). Text between tags becomes T_DATA
 * after whitespace control: '-' strips all whitespace on its side, '+' keeps it, lstrip_blocks
 * removes the indentation before a {% or {# that starts its line, trim_blocks the newline after
 * a %} or #}. Comments vanish here and {% raw %} bodies become plain text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_impl.h"

typedef struct lexer {
    tctx *c;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting; /* the last match ended with a newline (or nothing was matched yet) */
    token *t;
    size_t nt, cap;
    char balance[TMPL_MAX_NESTING];
    int depth;
} lexer;

static token *emit(lexer *L, uint8_t kind) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        token *t = talloc(L->c, cap * sizeof *t);
        if (L->nt) memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    token *t = &L->t[L->nt++];
    *t = (token){.kind = kind, .line = L->line};
    return t;
}

static bool at(const lexer *L, size_t pos, const char *lit) {
    size_t k = strlen(lit);
    return pos + k <= L->n && !memcmp(L->s + pos, lit, k);
}

/* Length of the whitespace (re's \s, Unicode) at pos. */
static size_t space_len(const lexer *L, size_t pos) {
    size_t i = pos;
    while (i < L->n) {
        size_t j = i;
        if (!py_isspace(u8next(L->s, &j))) break;
        i = j;
    }
    return i - pos;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

/* Emits the text [from, to) before a tag whose whitespace sign is sign ('-', '+' or 0);
 * lstrip applies to block and comment tags, not to {{. */
static void emit_text(lexer *L, size_t from, size_t to, char sign, bool lstrip) {
    size_t end = to;
    if (sign == '-') {
        while (end > from) { /* rstrip, over code points */
            size_t k = end - 1;
            while (k > from && ((uint8_t)L->s[k] & 0xC0) == 0x80) k--;
            size_t j = k;
            if (!py_isspace(u8next(L->s, &j))) break;
            end = k;
        }
    } else if (sign != '+' && lstrip) {
        size_t l = to;
        while (l > from && L->s[l - 1] != '\n') l--;
        if ((l > from || L->line_starting) && l < to && space_len(L, l) == to - l) end = l;
    }
    if (end > from) {
        token *t = emit(L, T_DATA);
        t->p = tstrndup(L->c, L->s + from, end - from);
        t->n = end - from;
    }
    count_lines(L, from, to);
}

/* After a %} or #}: sign '-' eats all whitespace, '+' nothing, else trim_blocks one newline. */
static void after_end(lexer *L, char sign) {
    size_t skip = sign == '-' ? space_len(L, L->pos) : sign == '+' ? 0 : at(L, L->pos, "\n");
    count_lines(L, L->pos, L->pos + skip);
    L->pos += skip;
}

/* Matches {%(-|+|)\s*WORD\s*(CLOSERS) at pos: returns the end or 0; *sign gets the opening sign
 * and *close_sign the closing one. closers: "-+" for an endraw (all three forms), "-" for raw
 * (no +%}, and its %} keeps the newline). */
static size_t match_raw_tag(const lexer *L, size_t pos, const char *word, char *sign, char *close_sign) {
    size_t p = pos + 2;
    *sign = p < L->n && (L->s[p] == '-' || L->s[p] == '+') ? L->s[p++] : 0;
    p += space_len(L, p);
    if (!at(L, p, word)) return 0;
    p += strlen(word);
    p += space_len(L, p);
    bool end = !strcmp(word, "endraw");
    if (end && at(L, p, "+%}")) {
        *close_sign = '+';
        return p + 3;
    }
    if (at(L, p, "-%}")) {
        *close_sign = '-';
        return p + 3;
    }
    if (at(L, p, "%}")) {
        *close_sign = end ? 0 : '+';
        return p + 2;
    }
    return 0;
}

static void lex_raw(lexer *L, size_t begin_end, char close_sign) {
    L->pos = begin_end;
    after_end(L, close_sign);
    L->line_starting = L->pos > 0 && L->s[L->pos - 1] == '\n';
    for (size_t k = L->pos; k + 1 < L->n; k++) {
        char sign, csign;
        size_t e;
        if (L->s[k] == '{' && L->s[k + 1] == '%' && (e = match_raw_tag(L, k, "endraw", &sign, &csign))) {
            emit_text(L, L->pos, k, sign, true);
            count_lines(L, k, e);
            L->pos = e;
            after_end(L, csign);
            L->line_starting = L->s[L->pos - 1] == '\n';
            return;
        }
    }
    tfail(L->c, L->line, "missing end of raw directive");
}

static int hexval(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : (ch | 32) >= 'a' && (ch | 32) <= 'f' ? (ch | 32) - 'a' + 10 : -1;
}

/* (\d+_)*\d+ at p: its end, or p. */
static size_t digits(const lexer *L, size_t p) {
    const char *s = L->s;
    size_t i = p;
    while (i < L->n && s[i] >= '0' && s[i] <= '9') {
        i++;
        if (i + 1 < L->n && s[i] == '_' && s[i + 1] >= '0' && s[i + 1] <= '9') i++;
    }
    return i;
}

/* A number as jinja's float_re and integer_re take it; 0 when neither matches. */
static size_t lex_number(lexer *L, size_t p) {
    const char *s = L->s;
    char buf[128];
    size_t e = digits(L, p), k = 0;
    if (!(p > 0 && s[p - 1] == '.')) { /* float_re: digits, then a fraction and/or an exponent */
        size_t q = e;
        if (q + 1 < L->n && s[q] == '.' && digits(L, q + 1) > q + 1) q = digits(L, q + 1);
        size_t x = q;
        if (x < L->n && (s[x] | 32) == 'e') {
            x++;
            if (x < L->n && (s[x] == '+' || s[x] == '-')) x++;
        }
        size_t f = x > q && digits(L, x) > x ? digits(L, x) : q > e ? q : 0;
        if (f) {
            for (size_t i = p; i < f && k < sizeof buf - 1; i++)
                if (s[i] != '_') buf[k++] = s[i];
            buf[k] = 0;
            emit(L, T_FLOAT)->k = v_float(strtod(buf, NULL));
            return f;
        }
    }
    /* integer_re: 0b, 0o, 0x with at least one digit, else decimal, else zeros */
    char pfx = p + 1 < L->n && s[p] == '0' ? (char)(s[p + 1] | 32) : 0;
    int base = pfx == 'b' ? 2 : pfx == 'o' ? 8 : pfx == 'x' ? 16 : 10;
    size_t from = p, q = p + 2;
    if (base != 10) {
        for (;;) {
            size_t d = q + (q < L->n && s[q] == '_');
            if (d >= L->n || hexval(s[d]) < 0 || hexval(s[d]) >= base) break;
            q = d + 1;
        }
        if (q == p + 2) base = 10;
        else from = p + 2;
    }
    if (base == 10 && s[p] != '0') {
        q = e;
    } else if (base == 10) {
        q = p + 1;
        while (q < L->n && (s[q] == '0' || (s[q] == '_' && q + 1 < L->n && s[q + 1] == '0'))) q += s[q] == '_' ? 2 : 1;
    }
    for (size_t i = from; i < q && k < sizeof buf - 1; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = 0;
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    if (errno || v > INT64_MAX) tfail(L->c, L->line, "integer literal %s is too large", buf);
    emit(L, T_INT)->k = v_int((int64_t)v);
    return q;
}

/* A string literal, decoded as Python's "unicode-escape" codec decodes it (what jinja does). */
static size_t lex_string(lexer *L, size_t p) {
    tctx *c = L->c;
    const char *s = L->s;
    char q = s[p];
    size_t i = p + 1;
    while (i < L->n && s[i] != q) i += s[i] == '\\' ? 2 : 1;
    if (i >= L->n) tfail(c, L->line, "unterminated string literal");
    tbuf b = {0};
    tb_put(c, &b, "", 0);
    for (size_t k = p + 1; k < i;) {
        if (s[k] != '\\') {
            size_t at0 = k;
            u8next(s, &k);
            tb_put(c, &b, s + at0, k - at0);
            continue;
        }
        char e = s[k + 1];
        k += 2;
        uint32_t cp = 0;
        int need = 0;
        switch (e) {
        case '\n': continue;
        case '\\': tb_putc(c, &b, '\\'); continue;
        case '\'': tb_putc(c, &b, '\''); continue;
        case '"': tb_putc(c, &b, '"'); continue;
        case 'a': tb_putc(c, &b, '\a'); continue;
        case 'b': tb_putc(c, &b, '\b'); continue;
        case 'f': tb_putc(c, &b, '\f'); continue;
        case 'n': tb_putc(c, &b, '\n'); continue;
        case 'r': tb_putc(c, &b, '\r'); continue;
        case 't': tb_putc(c, &b, '\t'); continue;
        case 'v': tb_putc(c, &b, '\v'); continue;
        case 'x': need = 2; break;
        case 'u': need = 4; break;
        case 'U': need = 8; break;
        case 'N': tfail(c, L->line, "the \\N{...} string escape is not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && k < i && s[k] >= '0' && s[k] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[k++] - '0');
                break;
            }
            if ((uint8_t)e >= 0x80) {
                /* jinja first writes the character as \xNN/\uNNNN/\UNNNNNNNN text: the backslash
                 * before it escapes that text's backslash */
                size_t j = k - 1;
                uint32_t u = u8next(s, &j);
                k = j;
                tb_putc(c, &b, '\\');
                tb_printf(c, &b, u < 0x100 ? "\\x%02x" : u < 0x10000 ? "\\u%04x" : "\\U%08x", u);
                continue;
            }
            tb_putc(c, &b, '\\');
            tb_putc(c, &b, e);
            continue;
        }
        for (int d = 0; d < need; d++, k++) {
            int v = k < i ? hexval(s[k]) : -1;
            if (v < 0) tfail(c, L->line, "truncated \\%c escape in a string literal", e);
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) tfail(c, L->line, "illegal Unicode character in a string literal");
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
            tfail(c, L->line, "a NUL or surrogate string escape is not supported");
        tb_putcp(c, &b, cp);
    }
    emit(L, T_STRING)->k = v_str(b.p, b.n);
    count_lines(L, p, i + 1);
    return i + 1;
}

static const char *const ops[] = {
    [OP_ADD] = "+",       [OP_SUB] = "-",    [OP_DIV] = "/",    [OP_FLOORDIV] = "//", [OP_MUL] = "*",
    [OP_MOD] = "%",       [OP_POW] = "**",   [OP_TILDE] = "~",  [OP_LBRACKET] = "[",  [OP_RBRACKET] = "]",
    [OP_LPAREN] = "(",    [OP_RPAREN] = ")", [OP_LBRACE] = "{", [OP_RBRACE] = "}",    [OP_EQ] = "==",
    [OP_NE] = "!=",       [OP_GT] = ">",     [OP_GTEQ] = ">=",  [OP_LT] = "<",        [OP_LTEQ] = "<=",
    [OP_ASSIGN] = "=",    [OP_DOT] = ".",    [OP_COLON] = ":",  [OP_PIPE] = "|",      [OP_COMMA] = ",",
    [OP_SEMICOLON] = ";",
};

static size_t lex_op(lexer *L, size_t p) {
    int best = -1;
    for (int o = 0; o <= OP_SEMICOLON; o++)
        if (at(L, p, ops[o]) && (best < 0 || strlen(ops[o]) > strlen(ops[best]))) best = o;
    if (best < 0) {
        size_t j = p;
        uint32_t cp = u8next(L->s, &j);
        if (cp < 0x80) tfail(L->c, L->line, "unexpected char '%c'", (char)cp);
        tfail(L->c, L->line, "unexpected char U+%04X", cp);
    }
    const char *close = best == OP_LBRACE ? "}" : best == OP_LPAREN ? ")" : best == OP_LBRACKET ? "]" : NULL;
    if (close) {
        if (L->depth == TMPL_MAX_NESTING) tfail(L->c, L->line, "brackets nested too deeply");
        L->balance[L->depth++] = *close;
    } else if (best == OP_RBRACE || best == OP_RPAREN || best == OP_RBRACKET) {
        if (!L->depth) tfail(L->c, L->line, "unexpected '%s'", ops[best]);
        char want = L->balance[--L->depth];
        if (want != *ops[best]) tfail(L->c, L->line, "unexpected '%s', expected '%c'", ops[best], want);
    }
    emit(L, T_OP)->op = (uint8_t)best;
    return p + strlen(ops[best]);
}

/* The tokens of a {{ }} (block false) or {% %} tag, through its end. */
static void lex_tag(lexer *L, bool block) {
    L->depth = 0;
    for (;;) {
        size_t p = L->pos;
        if (p >= L->n) tfail(L->c, L->line, "unexpected end of template inside a tag");
        if (!L->depth) {
            char sign = 0;
            size_t e = 0;
            if (block && at(L, p, "+%}")) sign = '+', e = p + 3;
            else if (block && at(L, p, "-%}")) sign = '-', e = p + 3;
            else if (block && at(L, p, "%}")) e = p + 2;
            else if (!block && at(L, p, "-}}")) sign = '-', e = p + 3;
            else if (!block && at(L, p, "}}")) sign = '+', e = p + 2; /* no trim_blocks after }} */
            if (e) {
                emit(L, block ? T_BLOCK_END : T_VAR_END);
                L->pos = e;
                after_end(L, sign);
                L->line_starting = L->s[L->pos - 1] == '\n';
                return;
            }
        }
        char ch = L->s[p];
        size_t w = space_len(L, p);
        if (w) {
            count_lines(L, p, p + w);
            L->pos = p + w;
        } else if (ch >= '0' && ch <= '9') {
            L->pos = lex_number(L, p);
        } else if (ch == '_' || ((ch | 32) >= 'a' && (ch | 32) <= 'z')) {
            size_t e = p;
            while (e < L->n && (L->s[e] == '_' || (L->s[e] >= '0' && L->s[e] <= '9') ||
                                ((L->s[e] | 32) >= 'a' && (L->s[e] | 32) <= 'z')))
                e++;
            token *t = emit(L, T_NAME);
            t->p = tstrndup(L->c, L->s + p, e - p);
            t->n = e - p;
            L->pos = e;
        } else if (ch == '\'' || ch == '"') {
            L->pos = lex_string(L, p);
        } else {
            L->pos = lex_op(L, p);
        }
    }
}

token *lex(tctx *c, const char *src, size_t *ntok) {
    size_t n = strlen(src);
    if (!u8valid(src, n)) tfail(c, 0, "the source is not valid UTF-8");
    /* newlines normalised to \n, one trailing newline dropped (keep_trailing_newline off) */
    char *s = talloc(c, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n') m--;
    s[m] = 0;
    lexer L = {.c = c, .s = s, .n = m, .line = 1, .line_starting = true};
    while (L.pos < L.n) {
        size_t k = L.pos;
        while (k + 1 < L.n && !(s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#'))) k++;
        if (k + 1 >= L.n) {
            emit_text(&L, L.pos, L.n, '+', false);
            break;
        }
        char kind = s[k + 1], sign, csign;
        size_t raw_end = kind == '%' ? match_raw_tag(&L, k, "raw", &sign, &csign) : 0;
        if (raw_end) {
            emit_text(&L, L.pos, k, sign, true);
            count_lines(&L, k, raw_end);
            lex_raw(&L, raw_end, csign);
            continue;
        }
        sign = k + 2 < L.n && (s[k + 2] == '-' || s[k + 2] == '+') ? s[k + 2] : 0;
        emit_text(&L, L.pos, k, sign, kind != '{');
        L.pos = k + 2 + (sign != 0);
        if (kind == '#') {
            size_t e = L.pos;
            while (e + 1 < L.n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= L.n) tfail(c, L.line, "missing end of comment tag");
            char esign = e > L.pos && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            count_lines(&L, L.pos, e + 2);
            L.pos = e + 2;
            after_end(&L, esign);
            L.line_starting = s[L.pos - 1] == '\n';
        } else {
            emit(&L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN);
            lex_tag(&L, kind == '%');
        }
    }
    emit(&L, T_EOF);
    *ntok = L.nt;
    return L.t;
}
