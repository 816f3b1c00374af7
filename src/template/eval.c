/* The renderer: walks the syntax tree with Jinja2's semantics. Scopes follow jinja's frames: each
 * for-loop iteration and each macro call gets a fresh scope (so a {% set %} inside a loop body
 * lasts one iteration and never leaks out), if blocks share their parent's, and namespace()
 * objects are the one thing templates may change in place. Attribute and item access follow the
 * sandbox's getattr/getitem (Python attribute first for ".", item first for "[]"), and a missing
 * name, key or attribute is Undefined, which only fails when used as a value. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/tmpl_impl.h"

struct scope {
    scope *parent;
    bool captured; /* a macro defined here holds it: it must outlive its loop iteration */
    int n, cap;
    const char **names;
    value *vals;
};

scope *scope_new(render *r, scope *parent) {
    scope *s = talloc(&r->c, sizeof *s);
    *s = (scope){.parent = parent};
    return s;
}

void scope_set(render *r, scope *sc, const char *name, value v) {
    for (int i = 0; i < sc->n; i++)
        if (!strcmp(sc->names[i], name)) {
            sc->vals[i] = v;
            return;
        }
    if (sc->n == sc->cap) {
        int cap = sc->cap ? 2 * sc->cap : 8;
        const char **names = talloc(&r->c, (size_t)cap * sizeof *names);
        value *vals = talloc(&r->c, (size_t)cap * sizeof *vals);
        if (sc->n) {
            memcpy(names, sc->names, (size_t)sc->n * sizeof *names);
            memcpy(vals, sc->vals, (size_t)sc->n * sizeof *vals);
        }
        sc->names = names;
        sc->vals = vals;
        sc->cap = cap;
    }
    sc->names[sc->n] = name;
    sc->vals[sc->n++] = v;
}

static value *scope_get(scope *sc, const char *name) {
    for (; sc; sc = sc->parent)
        for (int i = sc->n - 1; i >= 0; i--)
            if (!strcmp(sc->names[i], name)) return &sc->vals[i];
    return NULL;
}

/* An Undefined whose misuse reports the formatted message. */
__attribute__((format(printf, 2, 3))) static value undef_msg(render *r, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return v_undef(tstrndup(&r->c, tmp, strlen(tmp)));
}

_Noreturn static void undefined_error(render *r, int line, value u) {
    if (u.s.p) tfail(&r->c, line, "%s", u.s.p);
    tfail(&r->c, line, "a value is undefined");
}

/* What jinja's object_type_repr calls a value in messages: "dict object", "None"... */
static const char *obj_name(render *r, value v) {
    if (v.kind == V_NONE) return "None";
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s object", type_name(v));
    return tstrndup(&r->c, tmp, strlen(tmp));
}

value getattr_v(render *r, int line, value obj, const char *name, size_t n) {
    if (obj.kind == V_UNDEF) undefined_error(r, line, obj);
    value out;
    if (method_lookup(r, line, obj, name, n, &out)) return out;
    if (obj.kind == V_DICT || obj.kind == V_NS) {
        value *v = dict_getn(obj.d, name, n);
        if (v) return *v;
    }
    return undef_msg(r, "'%s' has no attribute '%.*s'", obj_name(r, obj), (int)n, name);
}

/* Python's index into a sequence of n items; false when out of range. */
static bool seq_index(value key, size_t n, size_t *out) {
    if (key.kind != V_INT && key.kind != V_BOOL) return false;
    int64_t i = key.kind == V_INT ? key.i : key.b;
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

value getitem_v(render *r, int line, value obj, value key) {
    if (obj.kind == V_UNDEF) undefined_error(r, line, obj);
    size_t i;
    switch (obj.kind) {
    case V_DICT: {
        value *v = dict_get(obj.d, key);
        if (v) return *v;
        break;
    }
    case V_NS:
        if (key.kind == V_STR) {
            value *v = dict_get(obj.d, key);
            if (v) return *v;
        }
        break;
    case V_LIST:
        if (obj.l->view != VIEW_NONE && obj.l->view != VIEW_RANGE) break;
        /* fall through */
    case V_TUPLE:
        if (seq_index(key, obj.l->n, &i)) return obj.l->v[i];
        break;
    case V_STR:
        if (seq_index(key, u8count(obj.s.p, obj.s.n), &i)) {
            size_t at = 0;
            for (size_t k = 0; k < i; k++) u8next(obj.s.p, &at);
            size_t end = at;
            u8next(obj.s.p, &end);
            return v_str(obj.s.p + at, end - at);
        }
        break;
    default: break;
    }
    if (key.kind == V_STR && obj.kind != V_DICT) {
        value out;
        if (method_lookup(r, line, obj, key.s.p, key.s.n, &out)) return out;
    }
    /* jinja words a missing string key like a missing attribute */
    if (key.kind == V_STR) return undef_msg(r, "'%s' has no attribute '%.*s'", obj_name(r, obj), (int)key.s.n, key.s.p);
    tbuf b = {0};
    v_repr_to(&r->c, line, &b, key);
    return undef_msg(r, "'%s' has no element %s", obj_name(r, obj), b.p);
}

/* Python's slice of a sequence: the indices it selects, as start, step and count. */
static value slice_v(render *r, int line, value obj, value lo, value hi, value st) {
    const value parts[3] = {lo, hi, st};
    int64_t idx[3];
    for (int k = 0; k < 3; k++) {
        value p = parts[k];
        if (p.kind == V_NONE || p.kind == V_NOARG) continue;
        if (p.kind != V_INT && p.kind != V_BOOL)
            tfail(&r->c, line, "slice indices must be integers or None, not %s", type_name(p));
        idx[k] = p.kind == V_INT ? p.i : p.b;
    }
    bool has[3];
    for (int k = 0; k < 3; k++) has[k] = parts[k].kind != V_NONE && parts[k].kind != V_NOARG;
    int64_t step = has[2] ? idx[2] : 1;
    if (step == 0) tfail(&r->c, line, "slice step cannot be zero");
    bool is_str = obj.kind == V_STR;
    if (obj.kind == V_UNDEF) undefined_error(r, line, obj);
    if (!is_str &&
        !((obj.kind == V_LIST && (obj.l->view == VIEW_NONE || obj.l->view == VIEW_RANGE)) || obj.kind == V_TUPLE))
        return undef_msg(r, "'%s' cannot be sliced", obj_name(r, obj));
    int64_t n = is_str ? (int64_t)u8count(obj.s.p, obj.s.n) : (int64_t)obj.l->n;
    /* PySlice_AdjustIndices */
    int64_t start, stop;
    if (!has[0]) {
        start = step < 0 ? n - 1 : 0;
    } else {
        start = idx[0];
        if (start < 0) start = start + n < 0 ? (step < 0 ? -1 : 0) : start + n;
        else if (start >= n) start = step < 0 ? n - 1 : n;
    }
    if (!has[1]) {
        stop = step < 0 ? -1 : n;
    } else {
        stop = idx[1];
        if (stop < 0) stop = stop + n < 0 ? (step < 0 ? -1 : 0) : stop + n;
        else if (stop >= n) stop = step < 0 ? n - 1 : n;
    }
    int64_t count = 0;
    if (step < 0 ? stop < start : start < stop)
        count = step < 0 ? (start - stop - 1) / -step + 1 : (stop - start - 1) / step + 1;
    if (!is_str) {
        value out = v_list(&r->c, (size_t)count, obj.kind == V_TUPLE ? V_TUPLE : V_LIST);
        for (int64_t k = 0; k < count; k++) out.l->v[out.l->n++] = obj.l->v[start + k * step];
        return out;
    }
    /* code point offsets, then the selected characters */
    size_t *off = talloc(&r->c, ((size_t)n + 1) * sizeof *off), at = 0;
    for (int64_t k = 0; k < n; k++) {
        off[k] = at;
        u8next(obj.s.p, &at);
    }
    off[n] = at;
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    for (int64_t k = 0; k < count; k++) {
        int64_t j = start + k * step;
        tb_put(&r->c, &b, obj.s.p + off[j], off[j + 1] - off[j]);
    }
    return v_str(b.p, b.n);
}

/* ---------------------------------------------------------------- arithmetic */

_Noreturn static void bad_operands(render *r, int line, const char *op, value a, value b) {
    if (a.kind == V_UNDEF) undefined_error(r, line, a);
    if (b.kind == V_UNDEF) undefined_error(r, line, b);
    tfail(&r->c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, type_name(a), type_name(b));
}

static int64_t iv(value v) { return v.kind == V_INT ? v.i : v.b; }

static value repeat(render *r, value seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.kind == V_STR) {
        if (seq.s.n && (uint64_t)times > TMPL_MAX_MEMORY / seq.s.n)
            tfail(&r->c, 0, "more than %u MiB of working memory", TMPL_MAX_MEMORY >> 20);
        tbuf b = {0};
        tb_put(&r->c, &b, "", 0);
        for (int64_t k = 0; k < times; k++) tb_put(&r->c, &b, seq.s.p, seq.s.n);
        return v_str(b.p, b.n);
    }
    if (seq.l->n && (uint64_t)times > TMPL_MAX_MEMORY / (seq.l->n * sizeof(value)))
        tfail(&r->c, 0, "more than %u MiB of working memory", TMPL_MAX_MEMORY >> 20);
    value out = v_list(&r->c, seq.l->n * (size_t)times, seq.kind);
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < seq.l->n; i++) out.l->v[out.l->n++] = seq.l->v[i];
    return out;
}

static bool plain_seq(value v) { return (v.kind == V_LIST && v.l->view == VIEW_NONE) || v.kind == V_TUPLE; }

/* CPython's float floor division and modulo (the result of % takes the divisor's sign). */
static void float_divmod(double a, double b, double *div_out, double *mod_out) {
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod) {
        if ((b < 0) != (mod < 0)) {
            mod += b;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, b);
    }
    double fl;
    if (div) {
        fl = floor(div);
        if (div - fl > 0.5) fl += 1.0;
    } else {
        fl = copysign(0.0, a / b);
    }
    *div_out = fl;
    *mod_out = mod;
}

value binary_op(render *r, int line, int op, value a, value b) {
    static const char *const sym[] = {[OP_ADD] = "+", [OP_SUB] = "-", [OP_DIV] = "/",          [OP_FLOORDIV] = "//",
                                      [OP_MUL] = "*", [OP_MOD] = "%", [OP_POW] = "** or pow()"};
    bool ints = (a.kind == V_INT || a.kind == V_BOOL) && (b.kind == V_INT || b.kind == V_BOOL);
    bool nums = is_num(a) && is_num(b);
    int64_t x = ints ? iv(a) : 0, y = ints ? iv(b) : 0, z;
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) break;
            return v_int(z);
        }
        if (nums) return v_float(as_double(a) + as_double(b));
        if (a.kind == V_STR && b.kind == V_STR) {
            char *p = talloc(&r->c, a.s.n + b.s.n + 1);
            memcpy(p, a.s.p, a.s.n);
            memcpy(p + a.s.n, b.s.p, b.s.n);
            p[a.s.n + b.s.n] = 0;
            return v_str(p, a.s.n + b.s.n);
        }
        if (plain_seq(a) && plain_seq(b) && a.kind == b.kind) {
            value out = v_list(&r->c, a.l->n + b.l->n, a.kind);
            for (size_t i = 0; i < a.l->n; i++) out.l->v[out.l->n++] = a.l->v[i];
            for (size_t i = 0; i < b.l->n; i++) out.l->v[out.l->n++] = b.l->v[i];
            return out;
        }
        bad_operands(r, line, sym[op], a, b);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z)) break;
            return v_int(z);
        }
        if (nums) return v_float(as_double(a) - as_double(b));
        bad_operands(r, line, sym[op], a, b);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z)) break;
            return v_int(z);
        }
        if (nums) return v_float(as_double(a) * as_double(b));
        if ((a.kind == V_STR || plain_seq(a)) && (b.kind == V_INT || b.kind == V_BOOL)) return repeat(r, a, iv(b));
        if ((b.kind == V_STR || plain_seq(b)) && (a.kind == V_INT || a.kind == V_BOOL)) return repeat(r, b, iv(a));
        bad_operands(r, line, sym[op], a, b);
    case OP_DIV:
        if (!nums) bad_operands(r, line, sym[op], a, b);
        if (as_double(b) == 0) tfail(&r->c, line, "division by zero");
        return v_float(as_double(a) / as_double(b));
    case OP_FLOORDIV:
    case OP_MOD:
        if (!nums) {
            if (op == OP_MOD && a.kind == V_STR) tfail(&r->c, line, "'%%' string formatting is not supported");
            bad_operands(r, line, sym[op], a, b);
        }
        if (as_double(b) == 0) tfail(&r->c, line, "integer division or modulo by zero");
        if (ints) {
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m && ((m < 0) != (y < 0))) {
                m += y;
                q -= 1;
            }
            return v_int(op == OP_MOD ? m : q);
        } else {
            double q, m;
            float_divmod(as_double(a), as_double(b), &q, &m);
            return v_float(op == OP_MOD ? m : q);
        }
    case OP_POW:
        if (!nums) bad_operands(r, line, sym[op], a, b);
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            for (int64_t e = y; e; e >>= 1) {
                if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) goto overflow;
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
            }
            return v_int(acc);
        }
        if (as_double(a) == 0 && as_double(b) < 0) tfail(&r->c, line, "0.0 cannot be raised to a negative power");
        return v_float(pow(as_double(a), as_double(b)));
    }
overflow:
    tfail(&r->c, line, "integer overflow (Python's integers are unbounded; these are 64-bit)");
}

static bool contains(render *r, int line, value item, value container) {
    switch (container.kind) {
    case V_UNDEF: return false;
    case V_STR:
        if (item.kind != V_STR)
            tfail(&r->c, line, "'in <string>' requires string as left operand, not %s", type_name(item));
        return memmem(container.s.p, container.s.n, item.s.p, item.s.n) != NULL || !item.s.n;
    case V_DICT: return dict_get(container.d, item) != NULL;
    case V_LIST:
    case V_TUPLE: {
        list *l = container.l;
        for (size_t i = l->pos; i < l->n; i++)
            if (v_eq(item, l->v[i])) {
                if (l->view == VIEW_GEN) l->pos = i + 1; /* a generator is consumed up to the match */
                return true;
            }
        if (l->view == VIEW_GEN) l->pos = l->n;
        return false;
    }
    default: tfail(&r->c, line, "argument of type '%s' is not iterable", type_name(container));
    }
}

bool compare_values(render *r, int line, int op, value a, value b) {
    switch (op) {
    case OP_EQ: return v_eq(a, b);
    case OP_NE: return !v_eq(a, b);
    case OP_IN: return contains(r, line, a, b);
    case OP_NOTIN: return !contains(r, line, a, b);
    default: break;
    }
    if (a.kind == V_UNDEF) undefined_error(r, line, a);
    if (b.kind == V_UNDEF) undefined_error(r, line, b);
    int c = v_cmp(&r->c, line, a, b);
    return op == OP_LT ? c < 0 : op == OP_LTEQ ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
}

/* ---------------------------------------------------------------- calls */

/* The evaluated arguments of a call, filter or test node. */
static args eval_args(render *r, scope *sc, const node *e) {
    value *v = e->args.n ? talloc(&r->c, (size_t)e->args.n * sizeof *v) : NULL;
    value *kw = e->kw.n ? talloc(&r->c, (size_t)e->kw.n * sizeof *kw) : NULL;
    for (int i = 0; i < e->args.n; i++) v[i] = eval(r, sc, e->args.v[i]);
    for (int i = 0; i < e->kw.n; i++) kw[i] = eval(r, sc, e->kw.v[i]);
    return (args){.n = e->args.n, .nkw = e->kw.n, .v = v, .kw = kw, .kwnames = e->names};
}

static int exec_body(render *r, scope *sc, const nodes *body, tbuf *out);

static value call_macro(render *r, int line, const struct macro *m, const args *a) {
    const node *def = m->def;
    if (a->n > def->nnames) tfail(&r->c, line, "macro '%s' takes not more than %d argument(s)", def->s, def->nnames);
    if (r->depth >= TMPL_MAX_DEPTH) tfail(&r->c, line, "macro calls nested more than %d deep", TMPL_MAX_DEPTH);
    scope *sc = scope_new(r, m->sc);
    value *bound = talloc(&r->c, (size_t)(def->nnames + 1) * sizeof *bound);
    for (int i = 0; i < def->nnames; i++) bound[i] = i < a->n ? a->v[i] : V_MISSING;
    for (int k = 0; k < a->nkw; k++) {
        int i = 0;
        while (i < def->nnames && strcmp(def->names[i], a->kwnames[k])) i++;
        if (i == def->nnames) tfail(&r->c, line, "macro '%s' takes no keyword argument '%s'", def->s, a->kwnames[k]);
        if (bound[i].kind != V_NOARG)
            tfail(&r->c, line, "macro '%s' got multiple values for argument '%s'", def->s, a->kwnames[k]);
        bound[i] = a->kw[k];
    }
    int first_default = def->nnames - def->args.n;
    for (int i = 0; i < def->nnames; i++) {
        value v = bound[i];
        if (v.kind == V_NOARG)
            v = i >= first_default
                    ? eval(r, sc, def->args.v[i - first_default])
                    : undef_msg(r, "parameter '%s' of macro '%s' was not provided", def->names[i], def->s);
        scope_set(r, sc, def->names[i], v);
    }
    tbuf out = {0};
    tb_put(&r->c, &out, "", 0);
    r->depth++;
    exec_body(r, sc, &def->body, &out);
    r->depth--;
    return v_str(out.p, out.n);
}

value call_value(render *r, int line, value fn, const args *a) {
    switch (fn.kind) {
    case V_MACRO: return call_macro(r, line, fn.macro, a);
    case V_FUNC:
    case V_METHOD: return call_builtin(r, line, fn, a);
    case V_UNDEF: undefined_error(r, line, fn);
    default: tfail(&r->c, line, "'%s' object is not callable", type_name(fn));
    }
}

/* A filter chain of a {% filter %} or {% set %} block, applied to the block's output. */
static value apply_chain(render *r, scope *sc, const node *f, value base) {
    value operand = f->a ? apply_chain(r, sc, f->a, base) : base;
    args a = eval_args(r, sc, f);
    return apply_filter(r, f->line, f->fn, operand, &a);
}

/* ---------------------------------------------------------------- expressions */

value eval(render *r, scope *sc, const node *e) {
    tstep(&r->c, e->line);
    switch (e->kind) {
    case E_CONST: return e->k;
    case E_NAME: {
        value *v = scope_get(sc, e->s);
        return v ? *v : undef_msg(r, "'%s' is undefined", e->s);
    }
    case E_LIST:
    case E_TUPLE: {
        value l = v_list(&r->c, (size_t)e->args.n, e->kind == E_LIST ? V_LIST : V_TUPLE);
        for (int i = 0; i < e->args.n; i++) l.l->v[l.l->n++] = eval(r, sc, e->args.v[i]);
        return l;
    }
    case E_DICT: {
        value d = v_dict(&r->c);
        for (int i = 0; i + 1 < e->args.n; i += 2) {
            value k = eval(r, sc, e->args.v[i]);
            if (k.kind == V_LIST || k.kind == V_DICT || k.kind == V_NS)
                tfail(&r->c, e->line, "unhashable type: '%s'", type_name(k));
            dict_set(&r->c, d.d, k, eval(r, sc, e->args.v[i + 1]));
        }
        return d;
    }
    case E_GETATTR: return getattr_v(r, e->line, eval(r, sc, e->a), e->s, e->n);
    case E_GETITEM: {
        value obj = eval(r, sc, e->a);
        const node *k = e->b;
        if (k->kind == E_SLICE) {
            value part[3];
            const node *pn[3] = {k->a, k->b, k->c};
            for (int i = 0; i < 3; i++) part[i] = pn[i] ? eval(r, sc, pn[i]) : V_MISSING;
            return slice_v(r, e->line, obj, part[0], part[1], part[2]);
        }
        return getitem_v(r, e->line, obj, eval(r, sc, k));
    }
    case E_SLICE: tfail(&r->c, e->line, "a slice outside a subscript");
    case E_CALL: {
        value fn = eval(r, sc, e->a);
        args a = eval_args(r, sc, e);
        return call_value(r, e->line, fn, &a);
    }
    case E_FILTER: {
        value v = eval(r, sc, e->a);
        args a = eval_args(r, sc, e);
        return apply_filter(r, e->line, e->fn, v, &a);
    }
    case E_TEST: {
        value v = eval(r, sc, e->a);
        args a = eval_args(r, sc, e);
        return v_bool(apply_test(r, e->line, e->fn, v, &a));
    }
    case E_NEG:
    case E_POS: {
        value v = eval(r, sc, e->a);
        if (v.kind == V_FLOAT) return v_float(e->kind == E_NEG ? -v.f : v.f);
        if (v.kind == V_INT || v.kind == V_BOOL) {
            int64_t i = iv(v);
            if (e->kind == E_POS) return v_int(i);
            if (i == INT64_MIN) tfail(&r->c, e->line, "integer overflow (these are 64-bit)");
            return v_int(-i);
        }
        if (v.kind == V_UNDEF) undefined_error(r, e->line, v);
        tfail(&r->c, e->line, "bad operand type for unary %c: '%s'", e->kind == E_NEG ? '-' : '+', type_name(v));
    }
    case E_NOT: return v_bool(!truthy(eval(r, sc, e->a)));
    case E_BIN: return binary_op(r, e->line, e->op, eval(r, sc, e->a), eval(r, sc, e->b));
    case E_AND: {
        value a = eval(r, sc, e->a);
        return truthy(a) ? eval(r, sc, e->b) : a;
    }
    case E_OR: {
        value a = eval(r, sc, e->a);
        return truthy(a) ? a : eval(r, sc, e->b);
    }
    case E_COMPARE: {
        value a = eval(r, sc, e->a);
        for (int i = 0; i < e->args.n; i++) {
            value b = eval(r, sc, e->args.v[i]);
            if (!compare_values(r, e->line, e->ops[i], a, b)) return v_bool(false);
            a = b;
        }
        return v_bool(true);
    }
    case E_CONCAT: {
        tbuf b = {0};
        tb_put(&r->c, &b, "", 0);
        for (int i = 0; i < e->args.n; i++) v_str_to(&r->c, e->line, &b, eval(r, sc, e->args.v[i]));
        return v_str(b.p, b.n);
    }
    case E_COND:
        if (truthy(eval(r, sc, e->a))) return eval(r, sc, e->b);
        return e->c ? eval(r, sc, e->c) : v_undef("the condition of an inline if was false and it has no else");
    default: tfail(&r->c, e->line, "internal error: node %d is not an expression", e->kind);
    }
}

/* ---------------------------------------------------------------- statements */

enum { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static void out_put(render *r, int line, tbuf *out, const char *p, size_t n) {
    if (out->n + n > TMPL_MAX_OUTPUT) tfail(&r->c, line, "output larger than %u MiB", TMPL_MAX_OUTPUT >> 20);
    tb_put(&r->c, out, p, n);
}

/* Binds targets (a name, or names unpacked from an iterable) or namespace.attribute. */
static void assign(render *r, scope *sc, const node *s, value v) {
    if (s->attr) {
        value *ns = scope_get(sc, s->s);
        if (!ns || ns->kind != V_NS)
            tfail(&r->c, s->line, "can only assign '%s.%s' when '%s' is a namespace()", s->s, s->attr, s->s);
        if (s->attr[0] == '_')
            tfail(&r->c, s->line, "chat templates cannot store underscore-prefixed attributes on a namespace");
        dict_set(&r->c, ns->d, v_cstr(s->attr), v);
        return;
    }
    if (!s->op) {
        scope_set(r, sc, s->names[0], v);
        return;
    }
    list *items = v_iter(&r->c, s->line, v);
    if (items->n != (size_t)s->nnames)
        tfail(&r->c, s->line, "%s values to unpack (expected %d, got %zu)",
              items->n > (size_t)s->nnames ? "too many" : "not enough", s->nnames, items->n);
    for (int i = 0; i < s->nnames; i++) scope_set(r, sc, s->names[i], items->v[i]);
}

static int exec_for(render *r, scope *sc, const node *s, tbuf *out) {
    list *items = v_iter(&r->c, s->line, eval(r, sc, s->a));
    if (s->b) { /* the loop's own "if": loop.index and loop.length count what passes */
        list *kept = v_list(&r->c, items->n, V_LIST).l;
        for (size_t i = 0; i < items->n; i++) {
            scope *t = scope_new(r, sc);
            assign(r, t, s, items->v[i]);
            if (truthy(eval(r, t, s->b))) kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    loopv *lp = talloc(&r->c, sizeof *lp);
    *lp = (loopv){.items = items};
    scope *it = NULL;
    for (size_t i = 0; i < items->n; i++) {
        tstep(&r->c, s->line);
        if (!it || it->captured) it = scope_new(r, sc);
        it->n = 0; /* each iteration starts afresh, as jinja's loop bodies do */
        lp->i = i;
        scope_set(r, it, "loop", (value){.kind = V_LOOP, .loop = lp});
        assign(r, it, s, items->v[i]);
        if (exec_body(r, it, &s->body, out) == FLOW_BREAK) break;
    }
    if (!items->n) return exec_body(r, sc, &s->orelse, out);
    return FLOW_NEXT;
}

static int exec_stmt(render *r, scope *sc, const node *s, tbuf *out) {
    tstep(&r->c, s->line);
    switch (s->kind) {
    case S_TEXT: out_put(r, s->line, out, s->s, s->n); return FLOW_NEXT;
    case S_OUTPUT: {
        value v = eval(r, sc, s->a);
        if (v.kind == V_STR) {
            out_put(r, s->line, out, v.s.p, v.s.n);
        } else {
            tbuf b = {0};
            v_str_to(&r->c, s->line, &b, v);
            out_put(r, s->line, out, b.p, b.n);
        }
        return FLOW_NEXT;
    }
    case S_IF: return exec_body(r, sc, truthy(eval(r, sc, s->a)) ? &s->body : &s->orelse, out);
    case S_FOR: return exec_for(r, sc, s, out);
    case S_SET: assign(r, sc, s, eval(r, sc, s->a)); return FLOW_NEXT;
    case S_SET_BLOCK:
    case S_FILTER_BLOCK: {
        tbuf b = {0};
        tb_put(&r->c, &b, "", 0);
        exec_body(r, sc, &s->body, &b);
        value v = v_str(b.p, b.n);
        if (s->a) v = apply_chain(r, sc, s->a, v);
        if (s->kind == S_SET_BLOCK) {
            assign(r, sc, s, v);
        } else {
            tbuf t = {0};
            v_str_to(&r->c, s->line, &t, v);
            out_put(r, s->line, out, t.p, t.n);
        }
        return FLOW_NEXT;
    }
    case S_MACRO: {
        struct macro *m = talloc(&r->c, sizeof *m);
        *m = (struct macro){.def = s, .sc = sc};
        sc->captured = true;
        scope_set(r, sc, s->s, (value){.kind = V_MACRO, .macro = m});
        return FLOW_NEXT;
    }
    case S_SCOPE: return exec_body(r, scope_new(r, sc), &s->body, out);
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    default: tfail(&r->c, s->line, "internal error: node %d is not a statement", s->kind);
    }
}

static int exec_body(render *r, scope *sc, const nodes *body, tbuf *out) {
    for (int i = 0; i < body->n; i++) {
        int flow = exec_stmt(r, sc, body->v[i], out);
        if (flow != FLOW_NEXT) return flow;
    }
    return FLOW_NEXT;
}

void render_template(render *r, const node *tree, tbuf *out) { exec_body(r, r->root, &tree->body, out); }
