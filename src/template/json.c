/* JSON in and out: the render context arrives as cJSON and becomes values (as json.loads would
 * make them), and the tojson filter writes values as Python's json.dumps does, with
 * transformers' options (ensure_ascii, indent, separators, sort_keys). */
#include <math.h>
#include <string.h>

#include "template/tmpl_impl.h"

value json_to_value(tctx *c, const cJSON *j) {
    if (cJSON_IsNull(j)) return V_NONE_VALUE;
    if (cJSON_IsBool(j)) return v_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no trace of how the number was written: integral values are ints */
        if (d == floor(d) && fabs(d) < 9.2e18) return v_int((int64_t)d);
        return v_float(d);
    }
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        if (!u8valid(j->valuestring, n)) tfail(c, 0, "context: a string is not valid UTF-8");
        return v_str(j->valuestring, n);
    }
    if (cJSON_IsArray(j)) {
        value l = v_list(c, (size_t)cJSON_GetArraySize(j), V_LIST);
        for (const cJSON *e = j->child; e; e = e->next) list_push(c, l.l, json_to_value(c, e));
        return l;
    }
    if (cJSON_IsObject(j)) {
        value d = v_dict(c);
        for (const cJSON *e = j->child; e; e = e->next) {
            size_t n = strlen(e->string);
            if (!u8valid(e->string, n)) tfail(c, 0, "context: a key is not valid UTF-8");
            dict_set(c, d.d, v_str(e->string, n), json_to_value(c, e));
        }
        return d;
    }
    tfail(c, 0, "context: unsupported JSON value");
}

static void dump_str(tctx *c, tbuf *b, const char *s, size_t n, bool ascii) {
    tb_putc(c, b, '"');
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t cp = u8next(s, &i);
        switch (cp) {
        case '"': tb_put(c, b, "\\\"", 2); continue;
        case '\\': tb_put(c, b, "\\\\", 2); continue;
        case '\n': tb_put(c, b, "\\n", 2); continue;
        case '\r': tb_put(c, b, "\\r", 2); continue;
        case '\t': tb_put(c, b, "\\t", 2); continue;
        case '\b': tb_put(c, b, "\\b", 2); continue;
        case '\f': tb_put(c, b, "\\f", 2); continue;
        default: break;
        }
        if (cp < 0x20 || (ascii && cp >= 0x7F)) { /* ensure_ascii: only ' '..'~' stay as they are */
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                tb_printf(c, b, "\\u%04x\\u%04x", 0xD800 | (v >> 10), 0xDC00 | (v & 0x3FF));
            } else {
                tb_printf(c, b, "\\u%04x", cp);
            }
        } else {
            tb_put(c, b, s + at, i - at);
        }
    }
    tb_putc(c, b, '"');
}

static void newline(tctx *c, tbuf *b, const json_style *st, int level) {
    tb_putc(c, b, '\n');
    for (int i = 0; i < level; i++) tb_put(c, b, st->indent, strlen(st->indent));
}

static void dump(tctx *c, int line, tbuf *b, value v, const json_style *st, int level);

/* Python converts keys that are not strings; other key types are refused. */
static void dump_key(tctx *c, int line, tbuf *b, value k, const json_style *st) {
    if (k.kind == V_STR) {
        dump_str(c, b, k.s.p, k.s.n, st->ensure_ascii);
        return;
    }
    if (k.kind == V_NONE || k.kind == V_BOOL || k.kind == V_INT || k.kind == V_FLOAT) {
        tbuf t = {0};
        dump(c, line, &t, k, st, 0);
        dump_str(c, b, t.p, t.n, false);
        return;
    }
    tfail(c, line, "tojson: keys must be str, int, float, bool or None, not %s", type_name(k));
}

static void dump(tctx *c, int line, tbuf *b, value v, const json_style *st, int level) {
    tstep(c, line);
    switch (v.kind) {
    case V_NONE: tb_put(c, b, "null", 4); return;
    case V_BOOL: tb_put(c, b, v.b ? "true" : "false", v.b ? 4 : 5); return;
    case V_INT: tb_printf(c, b, "%lld", (long long)v.i); return;
    case V_FLOAT:
        if (isnan(v.f)) {
            tb_put(c, b, "NaN", 3);
        } else if (isinf(v.f)) {
            tb_put(c, b, v.f < 0 ? "-Infinity" : "Infinity", v.f < 0 ? 9 : 8);
        } else {
            char tmp[32];
            float_repr(v.f, tmp);
            tb_put(c, b, tmp, strlen(tmp));
        }
        return;
    case V_STR: dump_str(c, b, v.s.p, v.s.n, st->ensure_ascii); return;
    case V_LIST:
        if (v.l->view != VIEW_NONE) break;
        /* fall through */
    case V_TUPLE:
        if (!v.l->n) {
            tb_put(c, b, "[]", 2);
            return;
        }
        tb_putc(c, b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) tb_put(c, b, st->item_sep, strlen(st->item_sep));
            if (st->indent) newline(c, b, st, level + 1);
            dump(c, line, b, v.l->v[i], st, level + 1);
        }
        if (st->indent) newline(c, b, st, level);
        tb_putc(c, b, ']');
        return;
    case V_DICT: {
        const dict *d = v.d;
        if (!d->n) {
            tb_put(c, b, "{}", 2);
            return;
        }
        size_t *order = talloc(c, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (st->sort_keys) /* insertion sort: stable, and dicts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && v_cmp(c, line, d->k[order[j - 1]], d->k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        tb_putc(c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) tb_put(c, b, st->item_sep, strlen(st->item_sep));
            if (st->indent) newline(c, b, st, level + 1);
            dump_key(c, line, b, d->k[order[i]], st);
            tb_put(c, b, st->key_sep, strlen(st->key_sep));
            dump(c, line, b, d->v[order[i]], st, level + 1);
        }
        if (st->indent) newline(c, b, st, level);
        tb_putc(c, b, '}');
        return;
    }
    default: break;
    }
    tfail(c, line, "tojson: Object of type %s is not JSON serializable", type_name(v));
}

void json_dump(tctx *c, int line, tbuf *b, value v, const json_style *st) { dump(c, line, b, v, st, 0); }
