/* What templates can call besides filters: the methods of str, dict and list that chat templates
 * use (with Python's semantics), the loop variable's attributes, and the globals transformers'
 * environment defines (raise_exception, strftime_now, namespace, range, dict). Every other
 * Python method name resolves to a method that fails when called, naming itself; the methods
 * the immutable sandbox refuses (list.append, dict.update, ...) resolve to its refusal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/tmpl_impl.h"

enum { G_STR = 1, G_DICT = 2, G_LIST = 4, G_TUPLE = 8 };

enum {
    M_UNSUPPORTED,
    M_UNSAFE,
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_RSPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_ENDSWITH,
    M_LOWER,
    M_UPPER,
    M_TITLE,
    M_CAPITALIZE,
    M_SWAPCASE,
    M_REPLACE,
    M_FIND,
    M_RFIND,
    M_INDEX,
    M_RINDEX,
    M_COUNT,
    M_JOIN,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_ISDIGIT,
    M_ISALPHA,
    M_ISALNUM,
    M_ISSPACE,
    M_ISLOWER,
    M_ISUPPER,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_COPY,
    M_LOOP_CYCLE,
};

static const struct {
    const char *name;
    uint8_t groups, id;
} methods[] = {
    {"strip", G_STR, M_STRIP},
    {"lstrip", G_STR, M_LSTRIP},
    {"rstrip", G_STR, M_RSTRIP},
    {"split", G_STR, M_SPLIT},
    {"rsplit", G_STR, M_RSPLIT},
    {"splitlines", G_STR, M_SPLITLINES},
    {"startswith", G_STR, M_STARTSWITH},
    {"endswith", G_STR, M_ENDSWITH},
    {"lower", G_STR, M_LOWER},
    {"upper", G_STR, M_UPPER},
    {"title", G_STR, M_TITLE},
    {"capitalize", G_STR, M_CAPITALIZE},
    {"swapcase", G_STR, M_SWAPCASE},
    {"replace", G_STR, M_REPLACE},
    {"find", G_STR, M_FIND},
    {"rfind", G_STR, M_RFIND},
    {"index", G_STR | G_LIST | G_TUPLE, M_INDEX},
    {"rindex", G_STR, M_RINDEX},
    {"count", G_STR | G_LIST | G_TUPLE, M_COUNT},
    {"join", G_STR, M_JOIN},
    {"removeprefix", G_STR, M_REMOVEPREFIX},
    {"removesuffix", G_STR, M_REMOVESUFFIX},
    {"isdigit", G_STR, M_ISDIGIT},
    {"isalpha", G_STR, M_ISALPHA},
    {"isalnum", G_STR, M_ISALNUM},
    {"isspace", G_STR, M_ISSPACE},
    {"islower", G_STR, M_ISLOWER},
    {"isupper", G_STR, M_ISUPPER},
    {"items", G_DICT, M_ITEMS},
    {"keys", G_DICT, M_KEYS},
    {"values", G_DICT, M_VALUES},
    {"get", G_DICT, M_GET},
    {"copy", G_DICT | G_LIST, M_COPY},
    /* modifying methods: the immutable sandbox refuses them */
    {"append", G_LIST, M_UNSAFE},
    {"clear", G_LIST | G_DICT, M_UNSAFE},
    {"extend", G_LIST, M_UNSAFE},
    {"insert", G_LIST, M_UNSAFE},
    {"pop", G_LIST | G_DICT, M_UNSAFE},
    {"remove", G_LIST, M_UNSAFE},
    {"reverse", G_LIST, M_UNSAFE},
    {"sort", G_LIST, M_UNSAFE},
    {"popitem", G_DICT, M_UNSAFE},
    {"setdefault", G_DICT, M_UNSAFE},
    {"update", G_DICT, M_UNSAFE},
    /* Python has these; this subset does not */
    {"casefold", G_STR, M_UNSUPPORTED},
    {"center", G_STR, M_UNSUPPORTED},
    {"encode", G_STR, M_UNSUPPORTED},
    {"expandtabs", G_STR, M_UNSUPPORTED},
    {"format", G_STR, M_UNSUPPORTED},
    {"format_map", G_STR, M_UNSUPPORTED},
    {"isascii", G_STR, M_UNSUPPORTED},
    {"isdecimal", G_STR, M_UNSUPPORTED},
    {"isidentifier", G_STR, M_UNSUPPORTED},
    {"isnumeric", G_STR, M_UNSUPPORTED},
    {"isprintable", G_STR, M_UNSUPPORTED},
    {"istitle", G_STR, M_UNSUPPORTED},
    {"ljust", G_STR, M_UNSUPPORTED},
    {"maketrans", G_STR, M_UNSUPPORTED},
    {"partition", G_STR, M_UNSUPPORTED},
    {"rjust", G_STR, M_UNSUPPORTED},
    {"rpartition", G_STR, M_UNSUPPORTED},
    {"translate", G_STR, M_UNSUPPORTED},
    {"zfill", G_STR, M_UNSUPPORTED},
    {"fromkeys", G_DICT, M_UNSUPPORTED},
};

static value bound(render *r, value self, int id, const char *name) {
    method *m = talloc(&r->c, sizeof *m);
    *m = (method){.self = self, .id = id, .name = name};
    return (value){.kind = V_METHOD, .m = m};
}

static bool loop_attr(render *r, int line, const loopv *lp, const char *name, value *out) {
    size_t i = lp->i, n = lp->items->n;
    if (!strcmp(name, "index")) *out = v_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = v_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = v_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = v_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = v_bool(i == 0);
    else if (!strcmp(name, "last")) *out = v_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = v_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = v_int(1);
    else if (!strcmp(name, "depth0")) *out = v_int(0);
    else if (!strcmp(name, "previtem")) *out = i ? lp->items->v[i - 1] : v_undef("there is no previous item");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? lp->items->v[i + 1] : v_undef("there is no next item");
    else if (!strcmp(name, "cycle"))
        *out = bound(r, (value){.kind = V_LOOP, .loop = (loopv *)lp}, M_LOOP_CYCLE, "cycle");
    else if (!strcmp(name, "changed")) tfail(&r->c, line, "loop.changed is not supported");
    else return false;
    return true;
}

bool method_lookup(render *r, int line, value v, const char *name, size_t n, value *out) {
    int group = v.kind == V_STR                              ? G_STR
                : v.kind == V_DICT                           ? G_DICT
                : v.kind == V_TUPLE                          ? G_TUPLE
                : v.kind == V_LIST && v.l->view == VIEW_NONE ? G_LIST
                                                             : 0;
    char key[32];
    if (n >= sizeof key || memchr(name, 0, n)) return false;
    memcpy(key, name, n);
    key[n] = 0;
    if (v.kind == V_LOOP) return loop_attr(r, line, v.loop, key, out);
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        if (!(methods[i].groups & group) || strcmp(methods[i].name, key)) continue;
        if (methods[i].id == M_UNSAFE) {
            char msg[96];
            snprintf(msg, sizeof msg, "access to attribute '%s' of '%s' object is unsafe.", key, type_name(v));
            *out = v_undef(tstrndup(&r->c, msg, strlen(msg)));
        } else {
            *out = bound(r, v, methods[i].id, methods[i].name);
        }
        return true;
    }
    return false;
}

/* ---------------------------------------------------------------- strings */

/* Letters outside ASCII whose case Python would change: this subset refuses to guess. */
static bool cased_outside_ascii(uint32_t cp) {
    static const uint32_t ranges[][2] = {
        {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},       {0xF8, 0x2AF},      {0x345, 0x345},
        {0x370, 0x52F},     {0x531, 0x587},     {0x10A0, 0x10FF},   {0x13A0, 0x13FD},   {0x1C80, 0x1CBF},
        {0x1D00, 0x1DBF},   {0x1E00, 0x1FFF},   {0x2126, 0x2132},   {0x214E, 0x214E},   {0x2160, 0x2188},
        {0x24B6, 0x24E9},   {0x2C00, 0x2D2F},   {0xA640, 0xA69F},   {0xA722, 0xA7FF},   {0xAB30, 0xABBF},
        {0xFB00, 0xFB17},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x104FF}, {0x10C80, 0x10CFF},
        {0x118A0, 0x118DF}, {0x16E40, 0x16E9F}, {0x1E900, 0x1E94F},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        if (cp >= ranges[i][0] && cp <= ranges[i][1]) return true;
    return false;
}

value str_case(render *r, int line, value s, int mode) {
    static const char *const what[] = {"lower()", "upper()", "swapcase()", "title()", "capitalize()"};
    char *p = talloc(&r->c, s.s.n + 1);
    bool prev_cased = false;
    for (size_t i = 0; i < s.s.n;) {
        size_t at = i;
        uint32_t cp = u8next(s.s.p, &i);
        if (cp >= 0x80) {
            if (cased_outside_ascii(cp))
                tfail(&r->c, line, "%s of the non-ASCII letter U+%04X is not supported", what[mode], cp);
            memcpy(p + at, s.s.p + at, i - at);
            prev_cased = false;
            continue;
        }
        char ch = (char)cp;
        bool lower = ch >= 'a' && ch <= 'z', upper = ch >= 'A' && ch <= 'Z', up;
        switch (mode) {
        case CASE_LOWER: up = false; break;
        case CASE_UPPER: up = true; break;
        case CASE_SWAP: up = lower; break;
        case CASE_TITLE: up = !prev_cased; break;
        default: up = at == 0; break;
        }
        if (up && lower) ch = (char)(ch - 32);
        else if (!up && upper) ch = (char)(ch + 32);
        p[at] = ch;
        prev_cased = lower || upper;
    }
    p[s.s.n] = 0;
    return v_str(p, s.s.n);
}

static bool in_chars(value chars, uint32_t cp) {
    if (chars.kind != V_STR) return py_isspace(cp);
    for (size_t i = 0; i < chars.s.n;)
        if (u8next(chars.s.p, &i) == cp) return true;
    return false;
}

value str_strip(render *r, int line, value s, value chars, bool left, bool right) {
    if (chars.kind != V_STR && chars.kind != V_NONE && chars.kind != V_NOARG)
        tfail(&r->c, line, "strip arg must be None or str");
    size_t a = 0, b = s.s.n;
    while (left && a < b) {
        size_t j = a;
        if (!in_chars(chars, u8next(s.s.p, &j))) break;
        a = j;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((uint8_t)s.s.p[k] & 0xC0) == 0x80) k--;
        size_t j = k;
        if (!in_chars(chars, u8next(s.s.p, &j))) break;
        b = k;
    }
    return v_str(s.s.p + a, b - a);
}

static value need_str(render *r, int line, value v, const char *what) {
    if (v.kind != V_STR) tfail(&r->c, line, "%s: expected str, got %s", what, type_name(v));
    return v;
}

/* Python's str.split/rsplit: by a separator, or (sep None) on runs of whitespace. */
value str_split(render *r, int line, value s, value sep, int64_t maxsplit, bool from_right) {
    value out = v_list(&r->c, 0, V_LIST);
    const char *p = s.s.p;
    size_t n = s.s.n;
    if (sep.kind == V_STR) {
        if (!sep.s.n) tfail(&r->c, line, "empty separator");
        list *l = out.l;
        if (!from_right) {
            size_t start = 0;
            const char *hit;
            while (maxsplit-- != 0 && (hit = memmem(p + start, n - start, sep.s.p, sep.s.n))) {
                list_push(&r->c, l, v_str(p + start, (size_t)(hit - p) - start));
                start = (size_t)(hit - p) + sep.s.n;
            }
            list_push(&r->c, l, v_str(p + start, n - start));
            return out;
        }
        size_t end = n;
        while (maxsplit != 0 && end >= sep.s.n) {
            size_t k = end - sep.s.n + 1, found = (size_t)-1;
            while (k-- > 0)
                if (!memcmp(p + k, sep.s.p, sep.s.n)) {
                    found = k;
                    break;
                }
            if (found == (size_t)-1) break;
            list_push(&r->c, l, v_str(p + found + sep.s.n, end - found - sep.s.n));
            end = found;
            maxsplit--;
        }
        list_push(&r->c, l, v_str(p, end));
        for (size_t i = 0; i < l->n / 2; i++) {
            value t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
        return out;
    }
    /* whitespace: words between runs; maxsplit leaves the rest (its inner spaces kept) */
    size_t *cut = talloc(&r->c, (n + 1) * 2 * sizeof *cut), nw = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        if (py_isspace(u8next(p, &j))) {
            i = j;
            continue;
        }
        size_t start = i;
        while (i < n) {
            size_t k = i;
            if (py_isspace(u8next(p, &k))) break;
            i = k;
        }
        cut[2 * nw] = start;
        cut[2 * nw + 1] = i;
        nw++;
    }
    size_t keep = maxsplit < 0 || (uint64_t)maxsplit >= nw ? nw : (size_t)maxsplit + 1;
    for (size_t w = 0; w < keep; w++) {
        size_t wi = from_right ? nw - keep + w : w;
        size_t a = cut[2 * wi], b = cut[2 * wi + 1];
        /* the unsplit remainder keeps its outer whitespace on its open side */
        if (keep < nw && !from_right && w == keep - 1) b = n;
        if (keep < nw && from_right && w == 0) a = 0;
        list_push(&r->c, out.l, v_str(p + a, b - a));
    }
    return out;
}

value str_splitlines(render *r, value s, bool keepends) {
    value out = v_list(&r->c, 0, V_LIST);
    const char *p = s.s.p;
    size_t start = 0;
    for (size_t i = 0; i < s.s.n;) {
        size_t at = i;
        uint32_t cp = u8next(p, &i);
        if (!(cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
              cp == 0x2028 || cp == 0x2029))
            continue;
        if (cp == '\r' && i < s.s.n && p[i] == '\n') i++;
        list_push(&r->c, out.l, v_str(p + start, (keepends ? i : at) - start));
        start = i;
    }
    if (start < s.s.n) list_push(&r->c, out.l, v_str(p + start, s.s.n - start));
    return out;
}

value str_replace(render *r, int line, value s, value old, value new, int64_t count) {
    need_str(r, line, old, "replace()");
    need_str(r, line, new, "replace()");
    tbuf b = {0};
    tb_put(&r->c, &b, "", 0);
    size_t i = 0;
    if (!old.s.n) { /* Python inserts new before every character and at the end */
        while (i <= s.s.n) {
            if (count-- != 0) tb_put(&r->c, &b, new.s.p, new.s.n);
            else break;
            if (i == s.s.n) return v_str(b.p, b.n);
            size_t at = i;
            u8next(s.s.p, &i);
            tb_put(&r->c, &b, s.s.p + at, i - at);
        }
        tb_put(&r->c, &b, s.s.p + i, s.s.n - i);
        return v_str(b.p, b.n);
    }
    const char *hit;
    while (count-- != 0 && (hit = memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n))) {
        tb_put(&r->c, &b, s.s.p + i, (size_t)(hit - s.s.p) - i);
        tb_put(&r->c, &b, new.s.p, new.s.n);
        i = (size_t)(hit - s.s.p) + old.s.n;
    }
    tb_put(&r->c, &b, s.s.p + i, s.s.n - i);
    return v_str(b.p, b.n);
}

/* Code point index of the first (or last) occurrence of sub, or -1. */
static int64_t str_find(value s, value sub, bool last) {
    const char *hit = NULL;
    if (!last) {
        hit = memmem(s.s.p, s.s.n, sub.s.p, sub.s.n);
    } else {
        for (size_t k = s.s.n - (sub.s.n <= s.s.n ? sub.s.n : s.s.n) + 1; sub.s.n <= s.s.n && k-- > 0;)
            if (!memcmp(s.s.p + k, sub.s.p, sub.s.n)) {
                hit = s.s.p + k;
                break;
            }
    }
    return hit ? (int64_t)u8count(s.s.p, (size_t)(hit - s.s.p)) : -1;
}

static bool affix(render *r, int line, value s, value a, bool suffix) {
    if (a.kind == V_TUPLE) {
        for (size_t i = 0; i < a.l->n; i++)
            if (affix(r, line, s, a.l->v[i], suffix)) return true;
        return false;
    }
    if (a.kind != V_STR)
        tfail(&r->c, line, "%s first arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith",
              type_name(a));
    if (a.s.n > s.s.n) return false;
    return !memcmp(s.s.p + (suffix ? s.s.n - a.s.n : 0), a.s.p, a.s.n);
}

/* str.isdigit() and friends over ASCII; Unicode's other digits and letters are refused. */
static bool str_is(render *r, int line, value s, int id) {
    if (!s.s.n) return false;
    bool any_cased = false;
    for (size_t i = 0; i < s.s.n; i++) {
        unsigned char ch = (unsigned char)s.s.p[i];
        if (ch >= 0x80 && id != M_ISSPACE) tfail(&r->c, line, "str.is*() of non-ASCII text is not supported");
        bool lower = ch >= 'a' && ch <= 'z', upper = ch >= 'A' && ch <= 'Z', digit = ch >= '0' && ch <= '9';
        any_cased |= lower || upper;
        switch (id) {
        case M_ISDIGIT:
            if (!digit) return false;
            break;
        case M_ISALPHA:
            if (!lower && !upper) return false;
            break;
        case M_ISALNUM:
            if (!lower && !upper && !digit) return false;
            break;
        case M_ISLOWER:
            if (upper) return false;
            break;
        case M_ISUPPER:
            if (lower) return false;
            break;
        default: break;
        }
    }
    if (id == M_ISSPACE) {
        for (size_t i = 0; i < s.s.n;)
            if (!py_isspace(u8next(s.s.p, &i))) return false;
        return true;
    }
    return id == M_ISLOWER || id == M_ISUPPER ? any_cased : true;
}

static int64_t int_arg(render *r, int line, value v, int64_t dflt, const char *what) {
    if (v.kind == V_NOARG || v.kind == V_NONE) return dflt;
    if (v.kind != V_INT && v.kind != V_BOOL)
        tfail(&r->c, line, "%s: an integer is required, not %s", what, type_name(v));
    return v.kind == V_INT ? v.i : v.b;
}

static value call_str_method(render *r, int line, const method *m, const args *a) {
    value s = m->self, p[2];
    char fname[32];
    snprintf(fname, sizeof fname, "str.%s", m->name);
    switch (m->id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        static const char *const names[] = {"chars"};
        bind_args(r, line, fname, a, 1, names, p);
        return str_strip(r, line, s, p[0], m->id != M_RSTRIP, m->id != M_LSTRIP);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const names[] = {"sep", "maxsplit"};
        bind_args(r, line, fname, a, 2, names, p);
        if (p[0].kind != V_NOARG && p[0].kind != V_NONE) need_str(r, line, p[0], fname);
        return str_split(r, line, s, p[0], int_arg(r, line, p[1], -1, fname), m->id == M_RSPLIT);
    }
    case M_SPLITLINES: {
        static const char *const names[] = {"keepends"};
        bind_args(r, line, fname, a, 1, names, p);
        return str_splitlines(r, s, truthy(p[0]));
    }
    case M_STARTSWITH:
    case M_ENDSWITH:
        if (a->n != 1 || a->nkw) tfail(&r->c, line, "%s() takes one argument here (no start/end)", fname);
        return v_bool(affix(r, line, s, a->v[0], m->id == M_ENDSWITH));
    case M_LOWER: return str_case(r, line, s, CASE_LOWER);
    case M_UPPER: return str_case(r, line, s, CASE_UPPER);
    case M_TITLE: return str_case(r, line, s, CASE_TITLE);
    case M_CAPITALIZE: return str_case(r, line, s, CASE_CAPITALIZE);
    case M_SWAPCASE: return str_case(r, line, s, CASE_SWAP);
    case M_REPLACE: {
        static const char *const names[] = {"old", "new", "count"};
        value q[3];
        bind_args(r, line, fname, a, 3, names, q);
        if (q[1].kind == V_NOARG) tfail(&r->c, line, "replace() expected at least 2 arguments");
        return str_replace(r, line, s, q[0], q[1], int_arg(r, line, q[2], -1, fname));
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        if (a->n != 1 || a->nkw) tfail(&r->c, line, "%s() takes one argument here (no start/end)", fname);
        value sub = need_str(r, line, a->v[0], fname);
        if (m->id == M_COUNT) {
            if (!sub.s.n) return v_int((int64_t)u8count(s.s.p, s.s.n) + 1);
            int64_t k = 0;
            const char *q = s.s.p, *e = s.s.p + s.s.n;
            for (; (q = memmem(q, (size_t)(e - q), sub.s.p, sub.s.n)); q += sub.s.n) k++;
            return v_int(k);
        }
        int64_t at = str_find(s, sub, m->id == M_RFIND || m->id == M_RINDEX);
        if (at < 0 && (m->id == M_INDEX || m->id == M_RINDEX)) tfail(&r->c, line, "substring not found");
        return v_int(at);
    }
    case M_JOIN: {
        if (a->n != 1 || a->nkw) tfail(&r->c, line, "str.join() takes exactly one argument");
        list *items = v_iter(&r->c, line, a->v[0]);
        tbuf b = {0};
        tb_put(&r->c, &b, "", 0);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].kind != V_STR)
                tfail(&r->c, line, "sequence item %zu: expected str instance, %s found", i, type_name(items->v[i]));
            if (i) tb_put(&r->c, &b, s.s.p, s.s.n);
            tb_put(&r->c, &b, items->v[i].s.p, items->v[i].s.n);
        }
        return v_str(b.p, b.n);
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (a->n != 1 || a->nkw) tfail(&r->c, line, "%s() takes exactly one argument", fname);
        value x = need_str(r, line, a->v[0], fname);
        bool suffix = m->id == M_REMOVESUFFIX;
        if (!affix(r, line, s, x, suffix)) return s;
        return v_str(s.s.p + (suffix ? 0 : x.s.n), s.s.n - x.s.n);
    }
    default:
        if (a->n || a->nkw) tfail(&r->c, line, "%s() takes no arguments", fname);
        return v_bool(str_is(r, line, s, m->id));
    }
}

/* ---------------------------------------------------------------- calls */

static void no_kwargs(render *r, int line, const args *a, const char *fname) {
    if (a->nkw) tfail(&r->c, line, "%s() takes no keyword arguments", fname);
}

static value dict_view(render *r, const dict *d, int view) {
    value out = v_list(&r->c, d->n, V_LIST);
    out.l->view = (uint8_t)view;
    for (size_t i = 0; i < d->n; i++) {
        if (view == VIEW_ITEMS) {
            value t = v_list(&r->c, 2, V_TUPLE);
            t.l->v[0] = d->k[i];
            t.l->v[1] = d->v[i];
            t.l->n = 2;
            out.l->v[i] = t;
        } else {
            out.l->v[i] = view == VIEW_KEYS ? d->k[i] : d->v[i];
        }
    }
    out.l->n = d->n;
    return out;
}

/* dict(*args, **kwargs) as namespace() and dict() take them: one mapping or iterable of pairs. */
static value make_dict(render *r, int line, const args *a, const char *fname) {
    value d = v_dict(&r->c);
    if (a->n > 1) tfail(&r->c, line, "%s expected at most 1 positional argument, got %d", fname, a->n);
    if (a->n == 1) {
        value src = a->v[0];
        if (src.kind == V_DICT || src.kind == V_NS) {
            for (size_t i = 0; i < src.d->n; i++) dict_set(&r->c, d.d, src.d->k[i], src.d->v[i]);
        } else {
            list *pairs = v_iter(&r->c, line, src);
            for (size_t i = 0; i < pairs->n; i++) {
                list *kv = v_iter(&r->c, line, pairs->v[i]);
                if (kv->n != 2)
                    tfail(&r->c, line, "%s: sequence element #%zu has length %zu; 2 is required", fname, i, kv->n);
                dict_set(&r->c, d.d, kv->v[0], kv->v[1]);
            }
        }
    }
    for (int k = 0; k < a->nkw; k++) dict_set(&r->c, d.d, v_cstr(a->kwnames[k]), a->kw[k]);
    return d;
}

/* Jinja2's default globals and transformers' additions (cycler, joiner and lipsum are jinja's
 * too, but no chat template uses them). */
static const char *const global_names[FN_COUNT] = {
    [FN_RAISE_EXCEPTION] = "raise_exception",
    [FN_STRFTIME_NOW] = "strftime_now",
    [FN_NAMESPACE] = "namespace",
    [FN_RANGE] = "range",
    [FN_DICT] = "dict",
    [FN_CYCLER] = "cycler",
    [FN_JOINER] = "joiner",
    [FN_LIPSUM] = "lipsum",
};

static time_t now(void) {
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    return epoch && *epoch ? (time_t)strtoll(epoch, NULL, 10) : time(NULL);
}

static value global_call(render *r, int line, int fn, const args *a) {
    switch (fn) {
    case FN_RAISE_EXCEPTION: {
        static const char *const names[] = {"message"};
        value p[1];
        bind_args(r, line, "raise_exception", a, 1, names, p);
        tbuf b = {0};
        v_str_to(&r->c, line, &b, p[0].kind == V_NOARG ? V_UNDEFINED : p[0]);
        tfail(&r->c, line, "raise_exception: %s", b.p ? b.p : "");
    }
    case FN_STRFTIME_NOW: {
        static const char *const names[] = {"format"};
        value p[1];
        bind_args(r, line, "strftime_now", a, 1, names, p);
        value f = need_str(r, line, p[0], "strftime_now()");
        if (f.s.n > 256 || memchr(f.s.p, 0, f.s.n)) tfail(&r->c, line, "strftime_now(): format too long");
        for (size_t i = 0; i + 1 < f.s.n; i++)
            if (f.s.p[i] == '%') {
                char d = f.s.p[++i];
                if (d == 'f' || d == 'z' || d == 'Z' || d == ':')
                    tfail(&r->c, line, "strftime_now(): %%%c is not supported", d);
            }
        char fmt[260], out[1024];
        memcpy(fmt, f.s.p, f.s.n);
        fmt[f.s.n] = 0;
        time_t t = now();
        struct tm tm;
        localtime_r(&t, &tm);
        size_t n = strftime(out, sizeof out, fmt, &tm);
        return v_str(tstrndup(&r->c, out, n), n);
    }
    case FN_NAMESPACE: {
        value d = make_dict(r, line, a, "namespace()");
        for (size_t i = 0; i < d.d->n; i++)
            if (d.d->k[i].kind == V_STR && d.d->k[i].s.n && d.d->k[i].s.p[0] == '_')
                tfail(&r->c, line, "chat templates cannot store underscore-prefixed attributes on a namespace");
        d.kind = V_NS;
        return d;
    }
    case FN_DICT: return make_dict(r, line, a, "dict()");
    case FN_RANGE: {
        no_kwargs(r, line, a, "range");
        if (a->n < 1 || a->n > 3) tfail(&r->c, line, "range expected 1 to 3 arguments, got %d", a->n);
        int64_t v[3] = {0, 0, 1};
        for (int i = 0; i < a->n; i++) v[a->n == 1 ? 1 : i] = int_arg(r, line, a->v[i], 0, "range()");
        if (!v[2]) tfail(&r->c, line, "range() arg 3 must not be zero");
        __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1],
                 step = v[2] > 0 ? v[2] : -(__int128)v[2];
        __int128 count = span > 0 ? (span + step - 1) / step : 0;
        if (count > 1000000) tfail(&r->c, line, "range() of more than a million items is not supported");
        value out = v_list(&r->c, (size_t)count, V_LIST);
        out.l->view = VIEW_RANGE;
        for (int64_t k = 0; k < (int64_t)count; k++) out.l->v[out.l->n++] = v_int(v[0] + k * v[2]);
        return out;
    }
    default: tfail(&r->c, line, "%s() is not supported", global_names[fn]);
    }
}

void add_globals(render *r, scope *root) {
    for (int fn = 0; fn < FN_COUNT; fn++) scope_set(r, root, global_names[fn], (value){.kind = V_FUNC, .fn = fn});
}

value call_builtin(render *r, int line, value fn, const args *a) {
    if (fn.kind == V_FUNC) return global_call(r, line, fn.fn, a);
    const method *m = fn.m;
    value self = m->self;
    if (m->id == M_UNSUPPORTED) tfail(&r->c, line, "%s.%s() is not supported", type_name(self), m->name);
    if (self.kind == V_STR) return call_str_method(r, line, m, a);
    switch (m->id) {
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES:
        if (a->n || a->nkw) tfail(&r->c, line, "dict.%s() takes no arguments", m->name);
        return dict_view(r, self.d, m->id == M_ITEMS ? VIEW_ITEMS : m->id == M_KEYS ? VIEW_KEYS : VIEW_VALUES);
    case M_GET: {
        no_kwargs(r, line, a, "dict.get");
        if (a->n < 1 || a->n > 2) tfail(&r->c, line, "get expected 1 or 2 arguments, got %d", a->n);
        value *v = dict_get(self.d, a->v[0]);
        return v ? *v : a->n == 2 ? a->v[1] : V_NONE_VALUE;
    }
    case M_COPY:
        if (a->n || a->nkw) tfail(&r->c, line, "copy() takes no arguments");
        if (self.kind == V_DICT) return make_dict(r, line, &(args){.n = 1, .v = &self}, "dict.copy");
        value copy = v_list(&r->c, self.l->n, V_LIST);
        if (self.l->n) memcpy(copy.l->v, self.l->v, self.l->n * sizeof(value));
        copy.l->n = self.l->n;
        return copy;
    case M_COUNT:
    case M_INDEX: {
        no_kwargs(r, line, a, m->name);
        if (a->n != 1) tfail(&r->c, line, "%s() takes exactly one argument here", m->name);
        int64_t k = 0;
        for (size_t i = 0; i < self.l->n; i++)
            if (v_eq(self.l->v[i], a->v[0])) {
                if (m->id == M_INDEX) return v_int((int64_t)i);
                k++;
            }
        if (m->id == M_INDEX) tfail(&r->c, line, "value is not in list");
        return v_int(k);
    }
    case M_LOOP_CYCLE:
        no_kwargs(r, line, a, "loop.cycle");
        if (!a->n) tfail(&r->c, line, "no items for cycling given");
        return a->v[self.loop->i % (size_t)a->n];
    default: tfail(&r->c, line, "internal error: method %d", m->id);
    }
}
