/* Jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py), with transformers' tojson.
 * Each filter is a handler in the `filters` table, found by name; each test a case of apply_test.
 * select, reject, map, unique, items and reverse give generators as jinja's do: always true,
 * without len(), consumed by one pass. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_impl.h"

typedef struct {
    const char *name;
    int id;
} named;

enum {
    TS_ODD,
    TS_EVEN,
    TS_DIVISIBLEBY,
    TS_DEFINED,
    TS_UNDEFINED,
    TS_NONE,
    TS_BOOLEAN,
    TS_FALSE,
    TS_TRUE,
    TS_INTEGER,
    TS_FLOAT,
    TS_LOWER,
    TS_UPPER,
    TS_STRING,
    TS_MAPPING,
    TS_NUMBER,
    TS_SEQUENCE,
    TS_ITERABLE,
    TS_CALLABLE,
    TS_IN,
    TS_EQ,
    TS_NE,
    TS_GT,
    TS_GE,
    TS_LT,
    TS_LE,
};

static const named tests[] = {
    {"odd", TS_ODD},
    {"even", TS_EVEN},
    {"divisibleby", TS_DIVISIBLEBY},
    {"defined", TS_DEFINED},
    {"undefined", TS_UNDEFINED},
    {"none", TS_NONE},
    {"boolean", TS_BOOLEAN},
    {"false", TS_FALSE},
    {"true", TS_TRUE},
    {"integer", TS_INTEGER},
    {"float", TS_FLOAT},
    {"lower", TS_LOWER},
    {"upper", TS_UPPER},
    {"string", TS_STRING},
    {"mapping", TS_MAPPING},
    {"number", TS_NUMBER},
    {"sequence", TS_SEQUENCE},
    {"iterable", TS_ITERABLE},
    {"callable", TS_CALLABLE},
    {"in", TS_IN},
    {"eq", TS_EQ},
    {"equalto", TS_EQ},
    {"ne", TS_NE},
    {"gt", TS_GT},
    {"greaterthan", TS_GT},
    {"ge", TS_GE},
    {"lt", TS_LT},
    {"lessthan", TS_LT},
    {"le", TS_LE},
};

static const char *const missing_tests[] = {"escaped", "filter", "sameas", "test", NULL};

/* A name not in a table: -2 for jinja2's that this subset refuses by name, else -1. */
static int not_found(const char *name, const char *const *missing) {
    for (int i = 0; missing[i]; i++)
        if (!strcmp(missing[i], name)) return -2;
    return -1;
}

int test_lookup(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
        if (!strcmp(tests[i].name, name)) return tests[i].id;
    return not_found(name, missing_tests);
}

void bind_args(render *r, int line, const char *fname, const args *a, int nparam, const char *const *params,
               value *out) {
    if (a->n > nparam) tfail(&r->c, line, "%s() takes at most %d argument(s) (%d given)", fname, nparam, a->n);
    for (int i = 0; i < nparam; i++) out[i] = i < a->n ? a->v[i] : V_MISSING;
    for (int k = 0; k < a->nkw; k++) {
        int i = 0;
        while (i < nparam && strcmp(params[i], a->kwnames[k])) i++;
        if (i == nparam) tfail(&r->c, line, "%s() got an unexpected keyword argument '%s'", fname, a->kwnames[k]);
        if (out[i].kind != V_NOARG)
            tfail(&r->c, line, "%s() got multiple values for argument '%s'", fname, a->kwnames[k]);
        out[i] = a->kw[k];
    }
}

/* ---------------------------------------------------------------- helpers */

static value soft_str(render *r, int line, value v) { return v_to_str(&r->c, line, v); }

static value gen(render *r, size_t cap) {
    value g = v_list(&r->c, cap, V_LIST);
    g.l->view = VIEW_GEN;
    return g;
}

/* The args after the first `skip` positional ones (for map/select's forwarding). */
static args rest_args(const args *a, int skip) {
    args out = *a;
    out.n = a->n > skip ? a->n - skip : 0;
    out.v = a->n > skip ? a->v + skip : NULL;
    return out;
}

/* jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each with getitem. */
static value get_path(render *r, int line, value item, value attr, value dflt) {
    if (attr.kind == V_NOARG || attr.kind == V_NONE) return item;
    if (attr.kind != V_STR) return getitem_v(r, line, item, attr);
    const char *p = attr.s.p, *end = p + attr.s.n;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
        value key = v_str(p, n);
        if (digits) {
            errno = 0;
            long long k = strtoll(tstrndup(&r->c, p, n), NULL, 10);
            if (errno) tfail(&r->c, line, "attribute index %.*s is too large", (int)n, p);
            key = v_int(k);
        }
        item = getitem_v(r, line, item, key);
        if (dflt.kind != V_NOARG && dflt.kind != V_NONE && item.kind == V_UNDEF) item = dflt;
        if (!dot) return item;
        p = dot + 1;
    }
}

static value ignore_case(render *r, int line, value v, bool case_sensitive) {
    return !case_sensitive && v.kind == V_STR ? str_case(r, line, v, CASE_LOWER) : v;
}

/* A stable merge sort of items by keys (Python's sorted() with key= and reverse=). */
static void sort_by(render *r, int line, value *items, value *keys, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_by(r, line, items, keys, h, reverse);
    sort_by(r, line, items + h, keys + h, n - h, reverse);
    value *ti = talloc(&r->c, n * sizeof *ti), *tk = talloc(&r->c, n * sizeof *tk);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = v_cmp(&r->c, line, keys[j], keys[i]);
        bool take_right = reverse ? c > 0 : c < 0;
        size_t from = take_right ? j++ : i++;
        ti[k] = items[from];
        tk[k++] = keys[from];
    }
    while (i < h) ti[k] = items[i], tk[k++] = keys[i++];
    while (j < n) ti[k] = items[j], tk[k++] = keys[j++];
    memcpy(items, ti, n * sizeof *ti);
    memcpy(keys, tk, n * sizeof *tk);
}

/* Python's float() of a string; false when it is not one. */
static bool parse_float(value s, double *out) {
    char buf[128];
    value t = s;
    size_t a = 0, b = t.s.n;
    while (a < b && strchr(" \t\n\r\v\f", t.s.p[a])) a++;
    while (b > a && strchr(" \t\n\r\v\f", t.s.p[b - 1])) b--;
    if (b == a || b - a >= sizeof buf) return false;
    memcpy(buf, t.s.p + a, b - a);
    buf[b - a] = 0;
    if (strpbrk(buf, "xXpP_")) return false; /* strtod's hex floats are not Python's */
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

/* jinja's do_int: int(value) (int(s, base) for strings), else int(float(value)), else default. */
static value to_int(value v, value dflt, value base_v) {
    int64_t base = base_v.kind == V_INT ? base_v.i : 10;
    if (v.kind == V_INT) return v;
    if (v.kind == V_BOOL) return v_int(v.b);
    if (v.kind == V_FLOAT && isfinite(v.f) && fabs(v.f) < 9.2e18) return v_int((int64_t)v.f);
    if (v.kind == V_STR) {
        char buf[128];
        size_t a = 0, b = v.s.n, k = 0;
        while (a < b && strchr(" \t\n\r\v\f", v.s.p[a])) a++;
        while (b > a && strchr(" \t\n\r\v\f", v.s.p[b - 1])) b--;
        for (size_t i = a; i < b && k < sizeof buf - 1; i++) { /* Python allows _ between digits */
            bool sep = v.s.p[i] == '_' && i > a && i + 1 < b && v.s.p[i - 1] != '_' && v.s.p[i + 1] != '_';
            if (!sep) buf[k++] = v.s.p[i];
        }
        buf[k] = 0;
        if (k && b - a < sizeof buf && base >= 2 && base <= 36) {
            char *end;
            errno = 0;
            long long x = strtoll(buf, &end, (int)base);
            if (!*end && !errno) return v_int(x);
        }
        double d;
        if (parse_float(v, &d) && isfinite(d) && fabs(d) < 9.2e18) return v_int((int64_t)d);
    }
    return dflt.kind == V_NOARG ? v_int(0) : dflt;
}

static value indent(render *r, int line, value s, value width, value first, value blank) {
    if (s.kind != V_STR) tfail(&r->c, line, "indent: expected str, got %s", type_name(s));
    if (width.kind == V_NOARG) width = v_int(4);
    if (width.kind != V_STR && width.kind != V_INT && width.kind != V_BOOL)
        tfail(&r->c, line, "indent: width must be an int or a string");
    value ind = width.kind == V_STR ? width : binary_op(r, line, OP_MUL, v_str(" ", 1), width);
    /* jinja appends a newline first, so that splitlines keeps a trailing empty line */
    list *lines = str_splitlines(r, binary_op(r, line, OP_ADD, s, v_str("\n", 1)), false).l;
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    if (truthy(first)) tb_put(&r->c, &b, ind.s.p, ind.s.n);
    for (size_t i = 0; i < lines->n; i++) {
        value ln = lines->v[i];
        if (i) {
            tb_putc(&r->c, &b, '\n');
            if (ln.s.n || truthy(blank)) tb_put(&r->c, &b, ind.s.p, ind.s.n);
        }
        tb_put(&r->c, &b, ln.s.p, ln.s.n);
    }
    return v_str(b.p, b.n);
}

static value title(render *r, int line, value s) {
    /* jinja's own: each piece after a run of [-\s({\[<] gets item[0].upper() + item[1:].lower() */
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    bool start = true;
    for (size_t i = 0; i < s.s.n;) {
        size_t at = i;
        uint32_t cp = u8next(s.s.p, &i);
        bool sep = py_isspace(cp) || (cp < 0x80 && strchr("-({[<", (int)cp));
        value ch = str_case(r, line, v_str(s.s.p + at, i - at), sep ? CASE_LOWER : start ? CASE_UPPER : CASE_LOWER);
        tb_put(&r->c, &b, ch.s.p, ch.s.n);
        start = sep;
    }
    return v_str(b.p, b.n);
}

static value round_f(render *r, int line, value v, value prec, value method) {
    int64_t p = prec.kind == V_NOARG ? 0 : prec.kind == V_INT ? prec.i : prec.kind == V_BOOL ? prec.b : -1;
    if (prec.kind != V_NOARG && prec.kind != V_INT && prec.kind != V_BOOL)
        tfail(&r->c, line, "round: precision must be an integer");
    if (p < 0 || p > 300) tfail(&r->c, line, "round with precision %lld is not supported", (long long)p);
    const char *m = method.kind == V_STR ? method.s.p : "common";
    size_t mn = method.kind == V_STR ? method.s.n : 6;
    bool common = mn == 6 && !memcmp(m, "common", 6), ceil_m = mn == 4 && !memcmp(m, "ceil", 4),
         floor_m = mn == 5 && !memcmp(m, "floor", 5);
    if (!common && !ceil_m && !floor_m)
        tfail(&r->c, line, "You can only round using \"common\", \"ceil\" or \"floor\"");
    if (!is_num(v)) tfail(&r->c, line, "round: type %s doesn't define __round__ method", type_name(v));
    if (common) {
        if (v.kind != V_FLOAT) return v_int(v.kind == V_INT ? v.i : v.b);
        if (!isfinite(v.f)) return v;
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)p, v.f); /* correctly rounded, ties to even, as CPython */
        return v_float(strtod(buf, NULL));
    }
    double scale = pow(10.0, (double)p), x = as_double(v) * scale;
    return v_float((ceil_m ? ceil(x) : floor(x)) / scale);
}

static value tojson(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    value p[4];
    bind_args(r, line, "tojson", a, 4, names, p);
    json_style st = {.item_sep = ", ", .key_sep = ": ", .ensure_ascii = truthy(p[0]), .sort_keys = truthy(p[3])};
    if (p[1].kind == V_STR) {
        st.indent = tstrndup(&r->c, p[1].s.p, p[1].s.n);
    } else if (p[1].kind == V_INT || p[1].kind == V_BOOL) {
        int64_t w = p[1].kind == V_INT ? p[1].i : p[1].b;
        if (w > 1000) tfail(&r->c, line, "tojson: indent %lld is too large", (long long)w);
        char *ind = talloc(&r->c, (size_t)(w > 0 ? w : 0) + 1);
        memset(ind, ' ', (size_t)(w > 0 ? w : 0));
        ind[w > 0 ? w : 0] = 0;
        st.indent = ind;
    } else if (p[1].kind != V_NOARG && p[1].kind != V_NONE) {
        tfail(&r->c, line, "tojson: indent must be an int or a string");
    }
    if (st.indent) st.item_sep = ",";
    if (p[2].kind != V_NOARG && p[2].kind != V_NONE) {
        list *sep = v_iter(&r->c, line, p[2]);
        if (sep->n != 2 || sep->v[0].kind != V_STR || sep->v[1].kind != V_STR)
            tfail(&r->c, line, "tojson: separators must be two strings");
        st.item_sep = tstrndup(&r->c, sep->v[0].s.p, sep->v[0].s.n);
        st.key_sep = tstrndup(&r->c, sep->v[1].s.p, sep->v[1].s.n);
    }
    tbuf b = {0};
    json_dump(&r->c, line, &b, v, &st);
    return v_str(b.p, b.n);
}

static value escape(render *r, int line, value v) {
    value s = soft_str(r, line, v);
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    for (size_t i = 0; i < s.s.n; i++) {
        switch (s.s.p[i]) {
        case '&': tb_put(&r->c, &b, "&amp;", 5); break;
        case '<': tb_put(&r->c, &b, "&lt;", 4); break;
        case '>': tb_put(&r->c, &b, "&gt;", 4); break;
        case '"': tb_put(&r->c, &b, "&#34;", 5); break;
        case '\'': tb_put(&r->c, &b, "&#39;", 5); break;
        default: tb_putc(&r->c, &b, s.s.p[i]);
        }
    }
    return v_str(b.p, b.n);
}

/* select/reject/selectattr/rejectattr: keep the items whose (attribute's) test is `want`. */
static value select_items(render *r, int line, value v, const args *a, bool attr, bool want) {
    if (attr && a->n < 1) tfail(&r->c, line, "selectattr/rejectattr need an attribute");
    int skip = attr ? 1 : 0, test = -1;
    if (a->n > skip) {
        if (a->v[skip].kind != V_STR) tfail(&r->c, line, "the test name must be a string");
        char *name = tstrndup(&r->c, a->v[skip].s.p, a->v[skip].s.n);
        test = test_lookup(name);
        if (test < 0) tfail(&r->c, line, test == -1 ? "unknown test '%s'" : "test '%s' is not supported", name);
    }
    args targs = rest_args(a, skip + 1);
    list *items = v_iter(&r->c, line, v);
    value out = gen(r, items->n);
    for (size_t i = 0; i < items->n; i++) {
        value x = attr ? get_path(r, line, items->v[i], a->v[0], V_MISSING) : items->v[i];
        bool ok = test < 0 ? truthy(x) : apply_test(r, line, test, x, &targs);
        if (ok == want) out.l->v[out.l->n++] = items->v[i];
    }
    return out;
}

static value map_items(render *r, int line, value v, const args *a) {
    list *items = v_iter(&r->c, line, v);
    value out = gen(r, items->n);
    value attr = V_MISSING, dflt = V_MISSING;
    for (int k = 0; k < a->nkw; k++) {
        if (!strcmp(a->kwnames[k], "attribute")) attr = a->kw[k];
        else if (!strcmp(a->kwnames[k], "default")) dflt = a->kw[k];
    }
    if (attr.kind != V_NOARG && !a->n) {
        for (size_t i = 0; i < items->n; i++) out.l->v[out.l->n++] = get_path(r, line, items->v[i], attr, dflt);
        return out;
    }
    if (!a->n || a->v[0].kind != V_STR) tfail(&r->c, line, "map needs a filter name or attribute=");
    char *name = tstrndup(&r->c, a->v[0].s.p, a->v[0].s.n);
    int fn = filter_lookup(name);
    if (fn < 0) tfail(&r->c, line, fn == -1 ? "unknown filter '%s'" : "filter '%s' is not supported", name);
    args fargs = rest_args(a, 1);
    for (size_t i = 0; i < items->n; i++) out.l->v[out.l->n++] = apply_filter(r, line, fn, items->v[i], &fargs);
    return out;
}

static value min_max(render *r, int line, value v, const args *a, bool max) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    value p[2];
    bind_args(r, line, max ? "max" : "min", a, 2, names, p);
    list *items = v_iter(&r->c, line, v);
    if (!items->n) return v_undef("No aggregated item, sequence was empty.");
    size_t best = 0;
    value bk = ignore_case(r, line, get_path(r, line, items->v[0], p[1], V_MISSING), truthy(p[0]));
    for (size_t i = 1; i < items->n; i++) {
        value k = ignore_case(r, line, get_path(r, line, items->v[i], p[1], V_MISSING), truthy(p[0]));
        if (max ? v_cmp(&r->c, line, k, bk) > 0 : v_cmp(&r->c, line, k, bk) < 0) best = i, bk = k;
    }
    return items->v[best];
}

static value sorted(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
    value p[3];
    bind_args(r, line, "sort", a, 3, names, p);
    list *items = v_iter(&r->c, line, v);
    value out = v_list(&r->c, items->n, V_LIST), *keys = talloc(&r->c, (items->n + 1) * sizeof *keys);
    for (size_t i = 0; i < items->n; i++) out.l->v[out.l->n++] = items->v[i];
    /* attribute may be "a,b": the key is then the list of both */
    value attrs = p[2].kind == V_STR ? str_split(r, line, p[2], v_str(",", 1), -1, false) : V_MISSING;
    for (size_t i = 0; i < items->n; i++) {
        if (attrs.kind == V_NOARG) {
            keys[i] = ignore_case(r, line, get_path(r, line, items->v[i], p[2], V_MISSING), truthy(p[1]));
            continue;
        }
        value k = v_list(&r->c, attrs.l->n, V_LIST);
        for (size_t j = 0; j < attrs.l->n; j++)
            k.l->v[k.l->n++] =
                ignore_case(r, line, get_path(r, line, items->v[i], attrs.l->v[j], V_MISSING), truthy(p[1]));
        keys[i] = attrs.l->n == 1 ? k.l->v[0] : k;
    }
    sort_by(r, line, out.l->v, keys, out.l->n, truthy(p[0]));
    return out;
}

static bool hashable(value v) { return v.kind != V_LIST && v.kind != V_DICT && v.kind != V_NS; }

/* ---------------------------------------------------------------- filters */

/* A filter's handler: v | name(a...) */
typedef value filter_fn(render *r, int line, value v, const args *a);

static value f_abs(render *r, int line, value v, const args *a) {
    (void)a;
    if (v.kind == V_FLOAT) return v_float(fabs(v.f));
    if (v.kind == V_INT || v.kind == V_BOOL) {
        int64_t i = v.kind == V_INT ? v.i : v.b;
        if (i == INT64_MIN) tfail(&r->c, line, "integer overflow (these are 64-bit)");
        return v_int(i < 0 ? -i : i);
    }
    tfail(&r->c, line, "bad operand type for abs(): '%s'", type_name(v));
}

static value f_attr(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"name"};
    value p[1];
    bind_args(r, line, "attr", a, 1, names, p);
    if (p[0].kind != V_STR) tfail(&r->c, line, "attr: the name must be a string");
    return getattr_v(r, line, v, p[0].s.p, p[0].s.n);
}

/* the filters without parameters (they ignore any arguments given) */
static value f_capitalize(render *r, int line, value v, const args *a) {
    (void)a;
    return str_case(r, line, soft_str(r, line, v), CASE_CAPITALIZE);
}
static value f_lower(render *r, int line, value v, const args *a) {
    (void)a;
    return str_case(r, line, soft_str(r, line, v), CASE_LOWER);
}
static value f_upper(render *r, int line, value v, const args *a) {
    (void)a;
    return str_case(r, line, soft_str(r, line, v), CASE_UPPER);
}
static value f_title(render *r, int line, value v, const args *a) {
    (void)a;
    return title(r, line, soft_str(r, line, v));
}
static value f_string(render *r, int line, value v, const args *a) {
    (void)a;
    return soft_str(r, line, v);
}
static value f_escape(render *r, int line, value v, const args *a) {
    (void)a;
    return escape(r, line, v);
}
static value f_count(render *r, int line, value v, const args *a) {
    (void)a;
    return v_int(v_len(&r->c, line, v));
}

static value f_default(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"default_value", "boolean"};
    value p[2];
    bind_args(r, line, "default", a, 2, names, p);
    if (v.kind == V_UNDEF || (truthy(p[1]) && !truthy(v))) return p[0].kind == V_NOARG ? v_str("", 0) : p[0];
    return v;
}

/* (key, value) tuples of a dict's entries */
static value pairs(render *r, value d, value out) {
    for (size_t i = 0; i < d.d->n; i++) {
        value t = v_list(&r->c, 2, V_TUPLE);
        t.l->v[0] = d.d->k[i];
        t.l->v[1] = d.d->v[i];
        t.l->n = 2;
        out.l->v[out.l->n++] = t;
    }
    return out;
}

static value f_dictsort(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"case_sensitive", "by", "reverse"};
    value p[3];
    bind_args(r, line, "dictsort", a, 3, names, p);
    if (v.kind != V_DICT) tfail(&r->c, line, "dictsort: expected a dict, got %s", type_name(v));
    int pos = 0;
    if (p[1].kind == V_STR && p[1].s.n == 5 && !memcmp(p[1].s.p, "value", 5)) pos = 1;
    else if (p[1].kind != V_NOARG && !(p[1].kind == V_STR && p[1].s.n == 3 && !memcmp(p[1].s.p, "key", 3)))
        tfail(&r->c, line, "You can only sort by either \"key\" or \"value\"");
    size_t n = v.d->n;
    value out = pairs(r, v, v_list(&r->c, n, V_LIST)), *keys = talloc(&r->c, (n + 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) keys[i] = ignore_case(r, line, pos ? v.d->v[i] : v.d->k[i], truthy(p[0]));
    sort_by(r, line, out.l->v, keys, n, truthy(p[2]));
    return out;
}

static value f_first(render *r, int line, value v, const args *a) {
    (void)a;
    if (v.kind == V_LIST && v.l->view == VIEW_GEN) {
        if (v.l->pos < v.l->n) return v.l->v[v.l->pos++];
        return v_undef("No first item, sequence was empty.");
    }
    list *items = v_iter(&r->c, line, v);
    return items->n ? items->v[0] : v_undef("No first item, sequence was empty.");
}

static value f_float(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"default"};
    value p[1];
    bind_args(r, line, "float", a, 1, names, p);
    double d;
    if (is_num(v)) return v_float(as_double(v));
    if (v.kind == V_STR && parse_float(v, &d)) return v_float(d);
    return p[0].kind == V_NOARG ? v_float(0.0) : p[0];
}

static value f_indent(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"width", "first", "blank"};
    value p[3];
    bind_args(r, line, "indent", a, 3, names, p);
    return indent(r, line, v, p[0], p[1], p[2]);
}

static value f_int(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"default", "base"};
    value p[2];
    bind_args(r, line, "int", a, 2, names, p);
    return to_int(v, p[0], p[1]);
}

static value f_items(render *r, int line, value v, const args *a) {
    (void)a;
    if (v.kind == V_UNDEF) return gen(r, 0);
    if (v.kind != V_DICT) tfail(&r->c, line, "Can only get item pairs from a mapping.");
    return pairs(r, v, gen(r, v.d->n));
}

static value f_join(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"d", "attribute"};
    value p[2];
    bind_args(r, line, "join", a, 2, names, p);
    list *items = v_iter(&r->c, line, v);
    value sep = p[0].kind == V_NOARG ? v_str("", 0) : soft_str(r, line, p[0]);
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    for (size_t i = 0; i < items->n; i++) {
        if (i) tb_put(&r->c, &b, sep.s.p, sep.s.n);
        v_str_to(&r->c, line, &b, get_path(r, line, items->v[i], p[1], V_MISSING));
    }
    return v_str(b.p, b.n);
}

static value f_last(render *r, int line, value v, const args *a) {
    (void)a;
    if (v.kind == V_LIST && v.l->view == VIEW_GEN) tfail(&r->c, line, "'generator' object is not reversible");
    list *items = v_iter(&r->c, line, v);
    return items->n ? items->v[items->n - 1] : v_undef("No last item, sequence was empty.");
}

static value f_list(render *r, int line, value v, const args *a) {
    (void)a;
    list *items = v_iter(&r->c, line, v);
    value out = v_list(&r->c, items->n, V_LIST);
    for (size_t i = 0; i < items->n; i++) out.l->v[out.l->n++] = items->v[i];
    return out;
}

static value f_max(render *r, int line, value v, const args *a) { return min_max(r, line, v, a, true); }
static value f_min(render *r, int line, value v, const args *a) { return min_max(r, line, v, a, false); }
static value f_select(render *r, int line, value v, const args *a) { return select_items(r, line, v, a, false, true); }
static value f_reject(render *r, int line, value v, const args *a) { return select_items(r, line, v, a, false, false); }
static value f_selectattr(render *r, int line, value v, const args *a) {
    return select_items(r, line, v, a, true, true);
}
static value f_rejectattr(render *r, int line, value v, const args *a) {
    return select_items(r, line, v, a, true, false);
}

static value f_replace(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"old", "new", "count"};
    value p[3];
    bind_args(r, line, "replace", a, 3, names, p);
    if (p[1].kind == V_NOARG) tfail(&r->c, line, "replace() needs old and new");
    int64_t count = p[2].kind == V_INT ? p[2].i : -1;
    return str_replace(r, line, soft_str(r, line, v), soft_str(r, line, p[0]), soft_str(r, line, p[1]), count);
}

static value f_reverse(render *r, int line, value v, const args *a) {
    (void)a;
    if (v.kind == V_STR) {
        char *out = talloc(&r->c, v.s.n + 1);
        for (size_t i = 0; i < v.s.n;) {
            size_t at = i;
            u8next(v.s.p, &i);
            memcpy(out + v.s.n - i, v.s.p + at, i - at);
        }
        out[v.s.n] = 0;
        return v_str(out, v.s.n);
    }
    /* reversed() gives an iterator; what it refuses (a generator) becomes a reversed list */
    bool to_list = (v.kind == V_LIST && v.l->view == VIEW_GEN) || v.kind == V_UNDEF;
    list *items = v_iter(&r->c, line, v);
    value out = to_list ? v_list(&r->c, items->n, V_LIST) : gen(r, items->n);
    for (size_t i = items->n; i-- > 0;) out.l->v[out.l->n++] = items->v[i];
    return out;
}

static value f_round(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"precision", "method"};
    value p[2];
    bind_args(r, line, "round", a, 2, names, p);
    return round_f(r, line, v, p[0], p[1]);
}

static value f_sum(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"attribute", "start"};
    value p[2];
    bind_args(r, line, "sum", a, 2, names, p);
    list *items = v_iter(&r->c, line, v);
    value acc = p[1].kind == V_NOARG ? v_int(0) : p[1];
    for (size_t i = 0; i < items->n; i++)
        acc = binary_op(r, line, OP_ADD, acc, get_path(r, line, items->v[i], p[0], V_MISSING));
    return acc;
}

static value f_trim(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"chars"};
    value p[1];
    bind_args(r, line, "trim", a, 1, names, p);
    return str_strip(r, line, soft_str(r, line, v), p[0], true, true);
}

static value f_unique(render *r, int line, value v, const args *a) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    value p[2];
    bind_args(r, line, "unique", a, 2, names, p);
    list *items = v_iter(&r->c, line, v);
    value out = gen(r, items->n), *seen = talloc(&r->c, (items->n + 1) * sizeof *seen);
    size_t nseen = 0;
    for (size_t i = 0; i < items->n; i++) {
        value k = ignore_case(r, line, get_path(r, line, items->v[i], p[1], V_MISSING), truthy(p[0]));
        if (!hashable(k)) tfail(&r->c, line, "unhashable type: '%s'", type_name(k));
        size_t j = 0;
        while (j < nseen && !v_eq(seen[j], k)) j++;
        if (j < nseen) continue;
        seen[nseen++] = k;
        out.l->v[out.l->n++] = items->v[i];
    }
    return out;
}

/* A filter's id (what filter_lookup returns, and apply_filter takes) is its index here. */
static const struct {
    const char *name;
    filter_fn *fn;
} filters[] = {
    {"abs", f_abs},           {"attr", f_attr},       {"capitalize", f_capitalize},
    {"count", f_count},       {"d", f_default},       {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},
    {"first", f_first},       {"float", f_float},     {"indent", f_indent},
    {"int", f_int},           {"items", f_items},     {"join", f_join},
    {"last", f_last},         {"length", f_count},    {"list", f_list},
    {"lower", f_lower},       {"map", map_items},     {"max", f_max},
    {"min", f_min},           {"reject", f_reject},   {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_string},       {"select", f_select},   {"selectattr", f_selectattr},
    {"sort", sorted},         {"string", f_string},   {"sum", f_sum},
    {"title", f_title},       {"tojson", tojson},     {"trim", f_trim},
    {"unique", f_unique},     {"upper", f_upper},
};

/* jinja2's other filters: refused by name rather than reported unknown */
static const char *const missing_filters[] = {
    "batch",     "center",   "filesizeformat", "forceescape", "format",    "groupby",  "pprint",  "random", "slice",
    "striptags", "truncate", "urlencode",      "urlize",      "wordcount", "wordwrap", "xmlattr", NULL,
};

int filter_lookup(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++)
        if (!strcmp(filters[i].name, name)) return (int)i;
    return not_found(name, missing_filters);
}

void filter_check_args(tctx *c, const node *f) {
    filter_fn *h = filters[f->fn].fn;
    int pos = h == f_select || h == f_reject ? 0 : h == f_selectattr || h == f_rejectattr ? 1 : -1;
    bool is_filter = h == map_items && !f->kw.n;
    if (is_filter) pos = 0;
    if (pos < 0 || f->args.n <= pos || f->args.v[pos]->kind != E_CONST || f->args.v[pos]->k.kind != V_STR) return;
    const char *name = f->args.v[pos]->k.s.p;
    int id = is_filter ? filter_lookup(name) : test_lookup(name);
    if (id == -1) tfail(c, f->line, "unknown %s '%s'", is_filter ? "filter" : "test", name);
    if (id == -2) tfail(c, f->line, "%s '%s' is not supported", is_filter ? "filter" : "test", name);
}

value apply_filter(render *r, int line, int fn, value v, const args *a) {
    tstep(&r->c, line);
    if (fn < 0 || (size_t)fn >= sizeof filters / sizeof *filters) tfail(&r->c, line, "internal error: filter %d", fn);
    return filters[fn].fn(r, line, v, a);
}

/* ---------------------------------------------------------------- tests */

static value one_arg(render *r, int line, const args *a, const char *name) {
    if (a->n != 1 || a->nkw) tfail(&r->c, line, "test '%s' takes one argument", name);
    return a->v[0];
}

bool apply_test(render *r, int line, int fn, value v, const args *a) {
    tstep(&r->c, line);
    switch (fn) {
    case TS_ODD:
    case TS_EVEN:
    case TS_DIVISIBLEBY: {
        value d = fn == TS_DIVISIBLEBY ? one_arg(r, line, a, "divisibleby") : v_int(2);
        value m = binary_op(r, line, OP_MOD, v, d);
        return fn == TS_ODD ? v_eq(m, v_int(1)) : v_eq(m, v_int(0));
    }
    case TS_DEFINED: return v.kind != V_UNDEF;
    case TS_UNDEFINED: return v.kind == V_UNDEF;
    case TS_NONE: return v.kind == V_NONE;
    case TS_BOOLEAN: return v.kind == V_BOOL;
    case TS_FALSE: return v.kind == V_BOOL && !v.b;
    case TS_TRUE: return v.kind == V_BOOL && v.b;
    case TS_INTEGER: return v.kind == V_INT;
    case TS_FLOAT: return v.kind == V_FLOAT;
    case TS_LOWER:
    case TS_UPPER: {
        value s = soft_str(r, line, v);
        bool cased = false;
        for (size_t i = 0; i < s.s.n; i++) {
            char ch = s.s.p[i];
            if ((unsigned char)ch >= 0x80)
                tfail(&r->c, line, "the %s test of non-ASCII text is not supported",
                      fn == TS_LOWER ? "lower" : "upper");
            if ((fn == TS_LOWER && ch >= 'A' && ch <= 'Z') || (fn == TS_UPPER && ch >= 'a' && ch <= 'z')) return false;
            cased |= (ch | 32) >= 'a' && (ch | 32) <= 'z';
        }
        return cased;
    }
    case TS_STRING: return v.kind == V_STR;
    case TS_MAPPING: return v.kind == V_DICT;
    case TS_NUMBER: return is_num(v);
    case TS_SEQUENCE:
        return v.kind == V_STR || v.kind == V_TUPLE || v.kind == V_DICT || v.kind == V_UNDEF ||
               (v.kind == V_LIST && (v.l->view == VIEW_NONE || v.l->view == VIEW_RANGE));
    case TS_ITERABLE:
        return v.kind == V_STR || v.kind == V_LIST || v.kind == V_TUPLE || v.kind == V_DICT || v.kind == V_UNDEF;
    case TS_CALLABLE: return v.kind == V_MACRO || v.kind == V_FUNC || v.kind == V_METHOD || v.kind == V_UNDEF;
    case TS_IN: {
        return compare_values(r, line, OP_IN, v, one_arg(r, line, a, "in"));
    }
    default: {
        static const int ops[] = {
            [TS_EQ] = OP_EQ, [TS_NE] = OP_NE, [TS_GT] = OP_GT, [TS_GE] = OP_GTEQ, [TS_LT] = OP_LT, [TS_LE] = OP_LTEQ};
        static const char *const names[] = {
            [TS_EQ] = "eq", [TS_NE] = "ne", [TS_GT] = "gt", [TS_GE] = "ge", [TS_LT] = "lt", [TS_LE] = "le"};
        if (fn < TS_EQ || fn > TS_LE) tfail(&r->c, line, "internal error: test %d", fn);
        value other = one_arg(r, line, a, names[fn]);
        return compare_values(r, line, ops[fn], v, other);
    }
    }
}
