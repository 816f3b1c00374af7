/* Values as Jinja2 sees Python's objects: construction, truthiness, equality and ordering,
 * iteration and len(), and str()/repr() written exactly as CPython writes them (templates print
 * numbers, None, booleans and sometimes whole lists or dicts). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_impl.h"

const value V_UNDEFINED = {.kind = V_UNDEF};
const value V_NONE_VALUE = {.kind = V_NONE};
const value V_MISSING = {.kind = V_NOARG};

value v_bool(bool b) { return (value){.kind = V_BOOL, .b = b}; }
value v_int(int64_t i) { return (value){.kind = V_INT, .i = i}; }
value v_float(double f) { return (value){.kind = V_FLOAT, .f = f}; }
value v_str(const char *p, size_t n) { return (value){.kind = V_STR, .s = {p, n}}; }
value v_cstr(const char *s) { return v_str(s, strlen(s)); }
value v_undef(const char *what) { return (value){.kind = V_UNDEF, .s = {what, what ? strlen(what) : 0}}; }

value v_list(tctx *c, size_t cap, uint8_t kind) {
    list *l = talloc(c, sizeof *l);
    *l = (list){.cap = cap, .v = cap ? talloc(c, cap * sizeof(value)) : NULL};
    return (value){.kind = kind, .l = l};
}

void list_push(tctx *c, list *l, value v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        value *nv = talloc(c, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

value v_dict(tctx *c) {
    dict *d = talloc(c, sizeof *d);
    *d = (dict){0};
    return (value){.kind = V_DICT, .d = d};
}

value *dict_get(const dict *d, value key) {
    for (size_t i = 0; i < d->n; i++)
        if (v_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

value *dict_getn(const dict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == V_STR && d->k[i].s.n == n && !memcmp(d->k[i].s.p, key, n)) return &d->v[i];
    return NULL;
}

/* As a Python dict: a key already present keeps its place and takes the new value. */
void dict_set(tctx *c, dict *d, value key, value v) {
    value *old = dict_get(d, key);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        value *k = talloc(c, cap * sizeof *k), *vv = talloc(c, cap * sizeof *vv);
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof *k);
            memcpy(vv, d->v, d->n * sizeof *vv);
        }
        d->k = k;
        d->v = vv;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = v;
}

const char *type_name(value v) {
    static const char *const views[] = {"list", "dict_items", "dict_keys", "dict_values", "generator", "range"};
    switch (v.kind) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return views[v.l->view];
    case V_TUPLE: return "tuple";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_LOOP: return "LoopContext";
    case V_MACRO: return "Macro";
    case V_FUNC: return "function";
    case V_METHOD: return "builtin_function_or_method";
    default: return "missing argument";
    }
}

bool truthy(value v) {
    switch (v.kind) {
    case V_BOOL: return v.b;
    case V_INT: return v.i != 0;
    case V_FLOAT: return v.f != 0;
    case V_STR: return v.s.n > 0;
    case V_LIST: return v.l->view == VIEW_GEN || v.l->n > 0;
    case V_TUPLE: return v.l->n > 0;
    case V_DICT: return v.d->n > 0;
    case V_UNDEF:
    case V_NONE:
    case V_NOARG: return false;
    default: return true;
    }
}

bool is_num(value v) { return v.kind == V_BOOL || v.kind == V_INT || v.kind == V_FLOAT; }

double as_double(value v) { return v.kind == V_FLOAT ? v.f : v.kind == V_INT ? (double)v.i : (double)v.b; }

static int64_t as_int(value v) { return v.kind == V_INT ? v.i : v.b; }

bool v_eq(value a, value b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == V_FLOAT || b.kind == V_FLOAT) return as_double(a) == as_double(b);
        return as_int(a) == as_int(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case V_UNDEF:
    case V_NONE: return true;
    case V_STR: return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
    case V_LIST:
    case V_TUPLE:
        if (a.l == b.l) return true;
        if (a.l->view == VIEW_GEN || b.l->view == VIEW_GEN || a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!v_eq(a.l->v[i], b.l->v[i])) return false;
        return true;
    case V_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            value *w = dict_get(b.d, a.d->k[i]);
            if (!w || !v_eq(a.d->v[i], *w)) return false;
        }
        return true;
    case V_NS: return a.d == b.d;
    case V_LOOP: return a.loop == b.loop;
    case V_MACRO: return a.macro == b.macro;
    case V_FUNC: return a.fn == b.fn;
    case V_METHOD: return a.m == b.m;
    default: return false;
    }
}

static int sign(double d) { return (d > 0) - (d < 0); }

int v_cmp(tctx *c, int line, value a, value b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == V_FLOAT || b.kind == V_FLOAT) return sign(as_double(a) - as_double(b));
        int64_t x = as_int(a), y = as_int(b);
        return (x > y) - (x < y);
    }
    if (a.kind == V_STR && b.kind == V_STR) {
        /* UTF-8 byte order is code point order, which is Python's */
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int r = n ? memcmp(a.s.p, b.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return (a.s.n > b.s.n) - (a.s.n < b.s.n);
    }
    if (a.kind == b.kind && (a.kind == V_LIST || a.kind == V_TUPLE) && a.l->view == VIEW_NONE &&
        b.l->view == VIEW_NONE) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!v_eq(a.l->v[i], b.l->v[i])) return v_cmp(c, line, a.l->v[i], b.l->v[i]);
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    tfail(c, line, "'<' not supported between instances of '%s' and '%s'", type_name(a), type_name(b));
}

/* CPython's float repr: the shortest digits that read back to the same double, written fixed
 * for exponents in [-4, 16) and in scientific notation (two-digit exponent at least) otherwise. */
void float_repr(double f, char out[32]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    char *o = out, digits[24];
    const char *p = buf;
    if (*p == '-') *o++ = *p++;
    size_t nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o += sprintf(o, "0.");
            for (int i = 0; i < -exp - 1; i++) *o++ = '0';
            memcpy(o, digits, nd);
            o += nd;
        } else {
            for (int i = 0; i <= exp; i++) *o++ = (size_t)i < nd ? digits[i] : '0';
            *o++ = '.';
            if ((size_t)exp + 1 < nd) {
                memcpy(o, digits + exp + 1, nd - (size_t)exp - 1);
                o += nd - (size_t)exp - 1;
            } else {
                *o++ = '0';
            }
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    }
}

/* str.isprintable(), without Unicode's tables: every code point but controls, separators
 * other than ' ', the common format characters, surrogates, private use and noncharacters. */
static bool printable(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
    if (cp < 0x600) return true;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E || cp == 0x1680 ||
        (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
        cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
        (cp & 0xFFFE) == 0xFFFE || (cp >= 0xE0000 && cp <= 0xE007F) || cp >= 0xF0000)
        return false;
    return true;
}

static void repr_str(tctx *c, tbuf *b, const char *s, size_t n) {
    bool dq = memchr(s, '\'', n) && !memchr(s, '"', n);
    char q = dq ? '"' : '\'';
    tb_putc(c, b, q);
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t cp = u8next(s, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            tb_putc(c, b, '\\');
            tb_putc(c, b, (char)cp);
        } else if (cp == '\n') {
            tb_put(c, b, "\\n", 2);
        } else if (cp == '\r') {
            tb_put(c, b, "\\r", 2);
        } else if (cp == '\t') {
            tb_put(c, b, "\\t", 2);
        } else if (!printable(cp)) {
            tb_printf(c, b, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        } else {
            tb_put(c, b, s + at, i - at);
        }
    }
    tb_putc(c, b, q);
}

static void repr_items(tctx *c, int line, tbuf *b, const list *l, const char *open, const char *close) {
    tb_put(c, b, open, strlen(open));
    for (size_t i = l->pos; i < l->n; i++) {
        if (i > l->pos) tb_put(c, b, ", ", 2);
        v_repr_to(c, line, b, l->v[i]);
    }
    tb_put(c, b, close, strlen(close));
}

static void repr_dict(tctx *c, int line, tbuf *b, const dict *d) {
    tb_putc(c, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) tb_put(c, b, ", ", 2);
        v_repr_to(c, line, b, d->k[i]);
        tb_put(c, b, ": ", 2);
        v_repr_to(c, line, b, d->v[i]);
    }
    tb_putc(c, b, '}');
}

static void to_text(tctx *c, int line, tbuf *b, value v, bool repr) {
    char tmp[32];
    switch (v.kind) {
    case V_UNDEF:
        if (repr) tb_put(c, b, "Undefined", 9);
        return;
    case V_NONE: tb_put(c, b, "None", 4); return;
    case V_BOOL: tb_put(c, b, v.b ? "True" : "False", v.b ? 4 : 5); return;
    case V_INT: tb_printf(c, b, "%lld", (long long)v.i); return;
    case V_FLOAT:
        float_repr(v.f, tmp);
        tb_put(c, b, tmp, strlen(tmp));
        return;
    case V_STR:
        if (repr) repr_str(c, b, v.s.p, v.s.n);
        else tb_put(c, b, v.s.p, v.s.n);
        return;
    case V_TUPLE: repr_items(c, line, b, v.l, "(", v.l->n == 1 ? ",)" : ")"); return;
    case V_LIST:
        switch (v.l->view) {
        case VIEW_NONE: repr_items(c, line, b, v.l, "[", "]"); return;
        case VIEW_ITEMS: repr_items(c, line, b, v.l, "dict_items([", "])"); return;
        case VIEW_KEYS: repr_items(c, line, b, v.l, "dict_keys([", "])"); return;
        case VIEW_VALUES: repr_items(c, line, b, v.l, "dict_values([", "])"); return;
        default: break;
        }
        break;
    case V_DICT: repr_dict(c, line, b, v.d); return;
    case V_NS:
        tb_put(c, b, "<Namespace ", 11);
        repr_dict(c, line, b, v.d);
        tb_putc(c, b, '>');
        return;
    case V_LOOP: tb_printf(c, b, "<LoopContext %zu/%zu>", v.loop->i + 1, v.loop->items->n); return;
    case V_MACRO:
        tb_put(c, b, "<Macro ", 7);
        repr_str(c, b, v.macro->def->s, strlen(v.macro->def->s));
        tb_putc(c, b, '>');
        return;
    default: break;
    }
    /* Python prints these with a memory address: no output could match */
    tfail(c, line, "printing a %s object is not supported", type_name(v));
}

void v_str_to(tctx *c, int line, tbuf *b, value v) { to_text(c, line, b, v, false); }
void v_repr_to(tctx *c, int line, tbuf *b, value v) { to_text(c, line, b, v, true); }

value v_to_str(tctx *c, int line, value v) {
    if (v.kind == V_STR) return v;
    tbuf b = {0};
    v_str_to(c, line, &b, v);
    return v_str(b.p ? b.p : "", b.n);
}

list *v_iter(tctx *c, int line, value v) {
    switch (v.kind) {
    case V_LIST:
        if (v.l->view == VIEW_GEN) {
            list *rest = v_list(c, 0, V_LIST).l;
            rest->v = v.l->n ? v.l->v + v.l->pos : NULL;
            rest->n = rest->cap = v.l->n - v.l->pos;
            v.l->pos = v.l->n;
            return rest;
        }
        return v.l;
    case V_TUPLE: return v.l;
    case V_UNDEF: return v_list(c, 0, V_LIST).l;
    case V_DICT: {
        list *keys = v_list(c, v.d->n, V_LIST).l;
        for (size_t i = 0; i < v.d->n; i++) keys->v[keys->n++] = v.d->k[i];
        return keys;
    }
    case V_STR: {
        list *chars = v_list(c, v.s.n, V_LIST).l;
        for (size_t i = 0; i < v.s.n;) {
            size_t at = i;
            u8next(v.s.p, &i);
            chars->v[chars->n++] = v_str(v.s.p + at, i - at);
        }
        return chars;
    }
    default: tfail(c, line, "'%s' object is not iterable", type_name(v));
    }
}

int64_t v_len(tctx *c, int line, value v) {
    switch (v.kind) {
    case V_UNDEF: return 0;
    case V_STR: return (int64_t)u8count(v.s.p, v.s.n);
    case V_LIST:
        if (v.l->view == VIEW_GEN) break;
        return (int64_t)v.l->n;
    case V_TUPLE: return (int64_t)v.l->n;
    case V_DICT: return (int64_t)v.d->n;
    default: break;
    }
    tfail(c, line, "object of type '%s' has no len()", type_name(v));
}
