/* Model output into tool calls, in each family's format (see tool_calls.h). The scanner walks
 * the text through a few states: plain text (looking for a marker that opens a list of calls),
 * a list (an element, then a separator, a closing marker or the list's end), and after the
 * list. Every parse step answers "complete", "needs more text" or "fails", and needs-more is
 * only ever answered where the text ran out, so a stream waits exactly where a whole text would
 * have decided differently. */
#include "serve/tool_calls.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/err.h"

enum { OK = 1, MORE = 0, FAIL = -1, OOM = -2 };
enum { ST_TEXT, ST_ELEM, ST_LIST, ST_AFTER, ST_PLAIN };
typedef enum { EL_JSON, EL_MISTRAL_NAMED, EL_DEEPSEEK, EL_PYTHON } elem_kind;

#define PY_MAX_DEPTH 64 /* nesting of Python literals (a call's arguments come from a model) */

/* A marker opening a list of calls. In spec, a space stands for optional whitespace; the part
 * before it (the head) is what the text is searched for. */
typedef struct opener {
    const char *spec;
    const char *sep, *close; /* between elements, after the last (NULL: none) */
    elem_kind elem;
    bool repeat; /* elements may follow each other without a separator */
} opener;

typedef struct family {
    const char *name;
    bool at_start; /* calls only open the output (after whitespace); else text is content */
    bool bare;     /* at_start: an element may open the output without a marker */
    opener opens[3];
} family;

static const family families[] = {
    [TOOL_PARSER_HERMES] = {"hermes", false, false, {{"<tool_call>", NULL, "</tool_call>", EL_JSON, false}}},
    [TOOL_PARSER_LLAMA3_JSON] = {"llama3_json", true, true, {{"<|python_tag|>", ";", NULL, EL_JSON, false}}},
    [TOOL_PARSER_MISTRAL] = {"mistral",
                             false,
                             false,
                             {{"[TOOL_CALLS] [", ",", "]", EL_JSON, false},
                              {"[TOOL_CALLS]", NULL, NULL, EL_MISTRAL_NAMED, false}}},
    [TOOL_PARSER_DEEPSEEK_V3] = {"deepseek_v3",
                                 false,
                                 false,
                                 {{DS_CALLS_BEGIN, NULL, DS_CALLS_END, EL_DEEPSEEK, true}}},
    [TOOL_PARSER_GRANITE] = {"granite",
                             false,
                             false,
                             {{"<|tool_call|> [", ",", "]", EL_JSON, false},
                              {"<tool_call> [", ",", "]", EL_JSON, false}}},
    [TOOL_PARSER_PYTHONIC] = {"pythonic", true, false, {{"[", ",", "]", EL_PYTHON, false}}},
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

const char *tool_parser_name(tool_parser p) {
    return p > TOOL_PARSER_NONE && (int)p < N_FAMILIES ? families[p].name : "none";
}

tool_parser tool_parser_find(const char *name) {
    for (int i = 1; i < N_FAMILIES; i++)
        if (!strcmp(families[i].name, name)) return (tool_parser)i;
    return TOOL_PARSER_NONE;
}

const char *tool_parser_names(void) { return "hermes, llama3_json, mistral, deepseek_v3, granite, pythonic"; }

tool_parser tool_parser_detect(const char *src) {
    if (!src) return TOOL_PARSER_NONE;
    if (strstr(src, DS_CALLS_BEGIN)) return TOOL_PARSER_DEEPSEEK_V3;
    if (strstr(src, "[TOOL_CALLS]")) return TOOL_PARSER_MISTRAL;
    if (strstr(src, "<|tool_call|>") || (strstr(src, "<|start_of_role|>") && strstr(src, "<tool_call>")))
        return TOOL_PARSER_GRANITE;
    if (strstr(src, "<tool_call>")) return TOOL_PARSER_HERMES;
    /* Llama 3.2 and 4's instructions ask for [func_name1(params_name1=params_value1, ...)] */
    if (strstr(src, "func_name1(")) return TOOL_PARSER_PYTHONIC;
    /* Llama 3.1-3.3: <|python_tag|>, or (3.2) only JSON with "parameters" in an ipython chat */
    if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return TOOL_PARSER_LLAMA3_JSON;
    return TOOL_PARSER_NONE;
}

/* ---- small matchers: each returns OK (with *end), MORE or FAIL ---- */

static size_t skip_ws(const char *t, size_t len, size_t p) {
    while (p < len && isspace((unsigned char)t[p])) p++;
    return p;
}

/* The literal s at p. */
static int lit(const char *t, size_t len, size_t p, const char *s, size_t *end) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        if (p + i >= len) return MORE;
        if (t[p + i] != s[i]) return FAIL;
    }
    *end = p + n;
    return OK;
}

/* An opener's spec at p (a space: optional whitespace). */
static int spec_at(const char *t, size_t len, size_t p, const char *spec, size_t *end) {
    for (const char *s = spec; *s; s++) {
        if (*s == ' ') {
            p = skip_ws(t, len, p);
            continue;
        }
        if (p >= len) return MORE;
        if (t[p++] != *s) return FAIL;
    }
    *end = p;
    return OK;
}

static size_t head_len(const char *spec) {
    const char *sp = strchr(spec, ' ');
    return sp ? (size_t)(sp - spec) : strlen(spec);
}

/* The end of the JSON object or array at p (brackets matched outside strings). */
static int json_span(const char *t, size_t len, size_t p, size_t *end) {
    if (p >= len) return MORE;
    if (t[p] != '{' && t[p] != '[') return FAIL;
    int depth = 0;
    bool in_str = false;
    for (size_t i = p; i < len; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            *end = i + 1;
            return OK;
        }
    }
    return MORE;
}

/* Arguments as OpenAI sends them: compact JSON text. A string holding JSON (some models write
 * that) is taken for the JSON it holds; missing arguments are {}. */
static char *args_text(const cJSON *a) {
    if (!a) return mem_strdup("{}", "a tool call's arguments", NULL);
    if (cJSON_IsString(a)) {
        cJSON *inner = cJSON_Parse(a->valuestring);
        if (inner) {
            char *s = cJSON_PrintUnformatted(inner);
            cJSON_Delete(inner);
            return s;
        }
    }
    return cJSON_PrintUnformatted(a);
}

/* Name and arguments of a parsed call object ({"name", "arguments" or "parameters"}). */
static int call_from_json(const cJSON *o, char **name, char **args) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(n) || !n->valuestring[0]) return FAIL;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!(*name = mem_strdup(n->valuestring, "a tool call's name", NULL)) || !(*args = args_text(a))) {
        free(*name);
        *name = NULL;
        return OOM;
    }
    return OK;
}

/* A JSON value [p, *end) parsed; `object`: it must be an object. */
static int json_value(const char *t, size_t len, size_t p, size_t *end, bool object, cJSON **out) {
    int rc = json_span(t, len, p, end);
    if (rc != OK) return rc;
    if (object && t[p] != '{') return FAIL;
    return (*out = cJSON_ParseWithLength(t + p, *end - p)) ? OK : FAIL;
}

static int el_json(const char *t, size_t len, size_t p, size_t *end, char **name, char **args) {
    cJSON *o;
    int rc = json_value(t, len, skip_ws(t, len, p), end, true, &o);
    if (rc != OK) return rc;
    rc = call_from_json(o, name, args);
    cJSON_Delete(o);
    return rc;
}

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.'; }

/* A function name at p: *end past it; MORE when the text ends inside it. */
static int ident(const char *t, size_t len, size_t p, size_t *end) {
    size_t q = p;
    while (q < len && ident_char(t[q])) q++;
    if (q == len) return MORE;
    if (q == p) return FAIL;
    *end = q;
    return OK;
}

/* The arguments' JSON object at p, and the call's name [n0, n1). */
static int named_call(const char *t, size_t len, size_t n0, size_t n1, size_t p, size_t *end, char **name,
                      char **args) {
    cJSON *o;
    int rc = json_value(t, len, p, end, true, &o);
    if (rc != OK) return rc;
    *name = mem_strndup(t + n0, n1 - n0, "a tool call", NULL);
    *args = *name ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!*args) {
        free(*name);
        *name = NULL;
        return OOM;
    }
    return OK;
}

/* Mistral's newer form: NAME[ARGS]{...}. */
static int el_mistral_named(const char *t, size_t len, size_t p, size_t *end, char **name, char **args) {
    size_t n1, q;
    int rc = ident(t, len, p, &n1);
    if (rc == OK) rc = lit(t, len, n1, "[ARGS]", &q);
    return rc == OK ? named_call(t, len, p, n1, q, end, name, args) : rc;
}

/* <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>, or
 * V3.1's <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>. */
static int el_deepseek(const char *t, size_t len, size_t p, size_t *end, char **name, char **args) {
    size_t q, s1, n0, n1, a;
    int rc = lit(t, len, skip_ws(t, len, p), DS_CALL_BEGIN, &q);
    if (rc == OK) rc = ident(t, len, q, &s1);
    if (rc == OK) rc = lit(t, len, s1, DS_SEP, &n0);
    if (rc != OK) return rc;
    bool fenced = s1 - q == 8 && !memcmp(t + q, "function", 8);
    if (fenced) {
        rc = ident(t, len, n0, &n1);
        if (rc == OK) rc = lit(t, len, skip_ws(t, len, n1), "```json", &a);
    } else {
        n0 = q, n1 = s1, a = s1 + strlen(DS_SEP);
    }
    size_t j;
    if (rc == OK) rc = json_span(t, len, skip_ws(t, len, a), &j);
    if (rc != OK) return rc;
    size_t after = skip_ws(t, len, j);
    if (fenced && (rc = lit(t, len, after, "```", &after)) != OK) return rc;
    if ((rc = lit(t, len, skip_ws(t, len, after), DS_CALL_END, end)) != OK) return rc;
    return named_call(t, len, n0, n1, skip_ws(t, len, a), &j, name, args);
}

/* ---- Python literals (the pythonic format) into JSON values ---- */

static int py_value(const char *t, size_t len, size_t *p, cJSON **out, int depth);

/* A quoted string ('...' or "..."), its common escapes decoded. */
static int py_string(const char *t, size_t len, size_t *p, cJSON **out) {
    char q = t[*p];
    char *buf = mem_alloc(len - *p + 1, "a tool call's text", NULL);
    if (!buf) return OOM;
    size_t n = 0, i = *p + 1;
    for (;; i++) {
        if (i >= len) return free(buf), MORE;
        char c = t[i];
        if (c == q) break;
        if (c == '\n') return free(buf), FAIL;
        if (c == '\\') {
            if (++i >= len) return free(buf), MORE;
            switch (t[i]) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '0': c = 0; break;
            case '\\':
            case '\'':
            case '"': c = t[i]; break;
            default: return free(buf), FAIL;
            }
            if (!c) return free(buf), FAIL; /* NUL cannot be a C string */
        }
        buf[n++] = c;
    }
    buf[n] = 0;
    *p = i + 1;
    *out = cJSON_CreateString(buf);
    free(buf);
    return *out ? OK : OOM;
}

static int py_number(const char *t, size_t len, size_t *p, cJSON **out) {
    size_t i = *p;
    if (t[i] == '-' || t[i] == '+') i++;
    while (i < len && (isdigit((unsigned char)t[i]) || t[i] == '.' || t[i] == 'e' || t[i] == 'E' ||
                       ((t[i] == '-' || t[i] == '+') && (t[i - 1] == 'e' || t[i - 1] == 'E'))))
        i++;
    if (i == len) return MORE;
    char buf[64];
    if (i - *p >= sizeof buf || i == *p) return FAIL;
    memcpy(buf, t + *p, i - *p);
    buf[i - *p] = 0;
    char *e;
    double v = strtod(buf, &e);
    if (*e || !isdigit((unsigned char)buf[buf[0] == '-' || buf[0] == '+'])) return FAIL;
    *p = i;
    return (*out = cJSON_CreateNumber(v)) ? OK : OOM;
}

/* Items of a list, tuple or dict up to `close`; dict: key ':' value. */
static int py_items(const char *t, size_t len, size_t *p, char close, bool dict, cJSON *into, int depth) {
    size_t i = skip_ws(t, len, *p + 1);
    for (bool first = true;; first = false) {
        if (i >= len) return MORE;
        if (t[i] == close) break;
        if (!first) {
            if (t[i] != ',') return FAIL;
            i = skip_ws(t, len, i + 1);
            if (i >= len) return MORE;
            if (t[i] == close) break;
        }
        cJSON *k = NULL, *v = NULL;
        int rc = OK;
        if (dict) {
            if (t[i] != '"' && t[i] != '\'') return FAIL;
            if ((rc = py_string(t, len, &i, &k)) != OK) return rc;
            i = skip_ws(t, len, i);
            rc = i >= len ? MORE : t[i] != ':' ? FAIL : OK;
            i = skip_ws(t, len, i + 1);
        }
        if (rc == OK) rc = py_value(t, len, &i, &v, depth + 1);
        if (rc == OK) {
            if (dict) cJSON_AddItemToObject(into, k->valuestring, v);
            else cJSON_AddItemToArray(into, v);
        }
        cJSON_Delete(k);
        if (rc != OK) return rc;
        i = skip_ws(t, len, i);
    }
    *p = i + 1;
    return OK;
}

static int py_word(const char *t, size_t len, size_t p, const char *w) {
    size_t e;
    int rc = lit(t, len, p, w, &e);
    if (rc != OK) return rc;
    if (e == len) return MORE;
    return ident_char(t[e]) ? FAIL : OK;
}

static int py_value(const char *t, size_t len, size_t *p, cJSON **out, int depth) {
    if (*p >= len) return MORE;
    if (depth > PY_MAX_DEPTH) return FAIL;
    char c = t[*p];
    if (c == '"' || c == '\'') return py_string(t, len, p, out);
    if (c == '-' || c == '+' || isdigit((unsigned char)c)) return py_number(t, len, p, out);
    if (c == '[' || c == '(' || c == '{') {
        bool dict = c == '{';
        if (!(*out = dict ? cJSON_CreateObject() : cJSON_CreateArray())) return OOM;
        int rc = py_items(t, len, p, c == '[' ? ']' : c == '(' ? ')' : '}', dict, *out, depth);
        if (rc != OK) cJSON_Delete(*out), *out = NULL;
        return rc;
    }
    static const char *const words[] = {"True", "False", "None"};
    for (int w = 0; w < 3; w++) {
        int rc = py_word(t, len, *p, words[w]);
        if (rc == FAIL) continue;
        if (rc != OK) return rc;
        *p += strlen(words[w]);
        *out = w == 2 ? cJSON_CreateNull() : cJSON_CreateBool(w == 0);
        return *out ? OK : OOM;
    }
    return FAIL;
}

/* NAME(key=value, ...). */
static int el_python(const char *t, size_t len, size_t p, size_t *end, char **name, char **args) {
    size_t n0 = skip_ws(t, len, p), n1, i;
    int rc = ident(t, len, n0, &n1);
    if (rc != OK) return rc;
    i = skip_ws(t, len, n1);
    if (i >= len) return MORE;
    if (t[i] != '(') return FAIL;
    cJSON *o = cJSON_CreateObject();
    if (!o) return OOM;
    i = skip_ws(t, len, i + 1);
    for (bool first = true;; first = false) {
        if (i >= len) goto more;
        if (t[i] == ')') break;
        if (!first) {
            if (t[i] != ',') goto fail;
            i = skip_ws(t, len, i + 1);
            if (i >= len) goto more;
            if (t[i] == ')') break;
        }
        size_t k1;
        if ((rc = ident(t, len, i, &k1)) != OK) goto out;
        size_t eq = skip_ws(t, len, k1);
        if (eq >= len) goto more;
        if (t[eq] != '=') goto fail;
        size_t v = skip_ws(t, len, eq + 1);
        cJSON *val;
        if ((rc = py_value(t, len, &v, &val, 0)) != OK) goto out;
        char key[256];
        if (k1 - i >= sizeof key) {
            cJSON_Delete(val);
            goto fail;
        }
        memcpy(key, t + i, k1 - i);
        key[k1 - i] = 0;
        cJSON_AddItemToObject(o, key, val);
        i = skip_ws(t, len, v);
    }
    *end = i + 1;
    *name = mem_strndup(t + n0, n1 - n0, "a tool call", NULL);
    *args = *name ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (*args) return OK;
    free(*name);
    *name = NULL;
    return OOM;
more:
    rc = MORE;
    goto out;
fail:
    rc = FAIL;
out:
    cJSON_Delete(o);
    return rc;
}

static int element(elem_kind k, const char *t, size_t len, size_t p, size_t *end, char **name, char **args) {
    switch (k) {
    case EL_JSON: return el_json(t, len, p, end, name, args);
    case EL_MISTRAL_NAMED: return el_mistral_named(t, len, p, end, name, args);
    case EL_DEEPSEEK: return el_deepseek(t, len, p, end, name, args);
    case EL_PYTHON: return el_python(t, len, p, end, name, args);
    }
    return FAIL;
}

/* ---- the scanner ---- */

static int content(tool_stream *s, size_t from, size_t to, tool_item *it) {
    *it = (tool_item){.from = from, .to = to};
    s->pos = to;
    return 1;
}

/* Plain text: content up to the next opener (a possible one at the end is held back). */
static int scan_text(tool_stream *s, const family *f, const char *t, size_t len, bool done, tool_item *it,
                     bool *again) {
    size_t best = len, best_n = 0;
    for (int o = 0; o < 3 && f->opens[o].spec; o++) {
        size_t n = head_len(f->opens[o].spec);
        for (size_t i = s->pos; i < best; i++) {
            size_t m = len - i < n ? len - i : n;
            if (!memcmp(t + i, f->opens[o].spec, m)) {
                best = i, best_n = n;
                break;
            }
        }
    }
    if (best > s->pos) return content(s, s->pos, best, it);
    if (best == len) return done && len > s->pos ? content(s, s->pos, len, it) : 0;
    if (len - best < best_n) return done ? content(s, s->pos, len, it) : 0;
    for (int o = 0; o < 3 && f->opens[o].spec; o++) {
        size_t end = 0;
        int rc = spec_at(t, len, s->pos, f->opens[o].spec, &end);
        if (rc == MORE && !done) return 0;
        if (rc != OK) continue;
        s->run_start = s->pos;
        s->pos = end;
        s->state = ST_ELEM;
        s->open = o;
        s->calls_in_run = 0;
        *again = true;
        return 0;
    }
    return content(s, s->pos, s->pos + best_n, it); /* a head that opens nothing */
}

/* The start of an output whose calls may only open it. */
static int scan_start(tool_stream *s, const family *f, const char *t, size_t len, bool done, bool *again) {
    size_t p = skip_ws(t, len, 0), end = 0;
    if (p == len && !done) return 0;
    int rc = spec_at(t, len, p, f->opens[0].spec, &end);
    if (rc == MORE && !done) return 0;
    s->open = 0;
    s->calls_in_run = 0;
    s->run_start = 0;
    if (rc == OK) s->state = ST_ELEM, s->pos = end;
    else if (f->bare && p < len && t[p] == '{') s->state = ST_ELEM, s->pos = p;
    else s->state = ST_PLAIN;
    *again = true;
    return 0;
}

int tool_stream_next(tool_stream *s, const char *t, size_t len, bool done, tool_item *it, loom_err *err) {
    const family *f = &families[s->parser];
    for (;;) {
        bool again = false;
        int rc = 0;
        const opener *op = &f->opens[s->open];
        switch (s->state) {
        case ST_TEXT:
            rc = f->at_start ? scan_start(s, f, t, len, done, &again) : scan_text(s, f, t, len, done, it, &again);
            break;
        case ST_PLAIN: rc = len > s->pos ? content(s, s->pos, len, it) : 0; break;
        case ST_AFTER: {
            size_t p = skip_ws(t, len, s->pos);
            s->pos = p;
            if (p == len && !done) return 0;
            s->state = f->at_start ? ST_PLAIN : ST_TEXT;
            again = true;
            break;
        }
        case ST_ELEM: {
            size_t end = 0;
            char *name = NULL, *args = NULL;
            int e = element(op->elem, t, len, s->pos, &end, &name, &args);
            if (e == OOM) return loom_errf(err, "out of memory parsing a tool call");
            if (e == MORE && !done) return 0;
            if (e == OK) {
                *it = (tool_item){.is_call = true, .from = s->pos, .to = end, .name = name, .arguments = args};
                s->pos = end;
                s->state = ST_LIST;
                s->calls_in_run++;
                return 1;
            }
            /* not a call: the marker (or separator) before it is content, and text goes on */
            size_t from = s->run_start, to = s->pos;
            s->state = f->at_start ? ST_PLAIN : ST_TEXT;
            if (to > from) return content(s, from, to, it);
            again = true;
            break;
        }
        case ST_LIST: {
            size_t p = skip_ws(t, len, s->pos), end = 0;
            int c = op->close ? lit(t, len, p, op->close, &end) : FAIL;
            int sp = op->sep ? lit(t, len, p, op->sep, &end) : FAIL;
            if (!done && (p == len || c == MORE || sp == MORE)) return 0;
            if (c == OK) {
                s->pos = end;
                s->state = ST_AFTER;
            } else if (sp == OK || (op->repeat && p < len)) {
                s->run_start = p;
                s->pos = sp == OK ? end : p;
                s->state = ST_ELEM;
            } else {
                s->pos = p;
                s->state = ST_AFTER;
            }
            again = true;
            break;
        }
        }
        if (rc || !again) return rc;
    }
}

int tool_calls_parse(tool_parser p, const char *text, size_t len, int max_calls, tool_parse *out, loom_err *err) {
    *out = (tool_parse){0};
    tool_stream s = {.parser = p};
    tool_item it;
    size_t clen = 0, cap_calls = 0;
    char *c = mem_alloc(len + 1, "a tool call's text", NULL);
    if (!c) return loom_errf(err, "out of memory parsing tool calls");
    int rc;
    while ((rc = tool_stream_next(&s, text, len, true, &it, err)) == 1) {
        if (!it.is_call) {
            memcpy(c + clen, text + it.from, it.to - it.from);
            clen += it.to - it.from;
        } else if (out->n_calls >= max_calls) {
            free(it.name);
            free(it.arguments);
        } else if (ARRAY_RESERVE(out->calls, cap_calls, (size_t)out->n_calls + 1, "tool calls", err)) {
            free(it.name);
            free(it.arguments);
            rc = -1;
            break;
        } else {
            out->calls[out->n_calls++] = (tool_call){it.name, it.arguments};
        }
    }
    c[clen] = 0;
    bool blank = true;
    for (size_t i = 0; i < clen; i++) blank &= isspace((unsigned char)c[i]) != 0;
    if (blank && out->n_calls) free(c);
    else out->content = c;
    if (rc < 0) tool_parse_free(out);
    return rc < 0 ? -1 : 0;
}

void tool_parse_free(tool_parse *t) {
    for (int i = 0; i < t->n_calls; i++) {
        free(t->calls[i].name);
        free(t->calls[i].arguments);
    }
    free(t->calls);
    free(t->content);
    *t = (tool_parse){0};
}
