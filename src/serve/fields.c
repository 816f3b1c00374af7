/* The request fields' readers, beneath every parser of a request body (api_request.c,
 * structured.c, the tool calls): each takes a field when it is present and not null, checks its
 * type and range, and otherwise fails with the API's error naming the field. */
#include "serve/fields.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

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
