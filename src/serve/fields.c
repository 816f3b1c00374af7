/* The request fields' readers, beneath every parser of a request body (api_*.c, structured.c,
 * the tool calls): each takes a field when it is present and not null, checks its type and
 * range, and otherwise fails with the API's error naming the field; and the text of a message's
 * content parts, which every API joins the same way. */
#include "serve/fields.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

int api_fail(api_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* A member that is present and not null. */
const cJSON *get_field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int get_number(const cJSON *o, const char *k, double lo, double hi, double *out, api_error *e) {
    const cJSON *v = get_field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, k, "'%s' must be a number in [%g, %g]", k, lo, hi);
    *out = v->valuedouble;
    return 0;
}

int get_int(const cJSON *o, const char *k, long lo, long hi, long *out, api_error *e) {
    const cJSON *v = get_field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, k, "'%s' must be an integer in [%ld, %ld]", k, lo, hi);
    *out = (long)v->valuedouble;
    return 0;
}

int get_bool(const cJSON *o, const char *k, bool *out, api_error *e) {
    const cJSON *v = get_field(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return api_fail(e, 400, k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 0;
}

bool text_append(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s);
    if (ARRAY_RESERVE(*buf, *cap, *len + n + 2, "a message's text", NULL)) return false;
    if (*len) (*buf)[(*len)++] = '\n';
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return true;
}

char *text_of_parts(const cJSON *content, const char *const *types, int *bad) {
    if (cJSON_IsString(content)) {
        char *s = mem_strdup(content->valuestring, "a message's text", NULL);
        *bad = -2;
        return s;
    }
    *bad = -1;
    if (!cJSON_IsArray(content)) return NULL;
    char *out = NULL;
    size_t len = 0, cap = 0;
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"), *text = get_field(p, "text");
        const char *const *t = types;
        while (*t && !(cJSON_IsString(type) && !strcmp(type->valuestring, *t))) t++;
        if (!*t || !cJSON_IsString(text) || !text_append(&out, &len, &cap, text->valuestring)) {
            free(out);
            *bad = *t && cJSON_IsString(text) ? -2 : i;
            return NULL;
        }
        i++;
    }
    *bad = -2;
    return out ? out : mem_strdup("", "a message's text", NULL);
}
