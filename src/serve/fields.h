/* The request fields' readers (fields.c) and the API's error. */
#ifndef LOOM_SERVE_FIELDS_H
#define LOOM_SERVE_FIELDS_H
#include <cjson/cJSON.h>
#include <stdbool.h>

/* An error as the API reports it: HTTP status, message, and the request field at fault. */
typedef struct api_error {
    int status;
    char msg[512];
    char param[64];
    const char *code; /* e.g. "model_not_found"; NULL: none */
} api_error;

/* Fills e (param: the field at fault, or NULL) and returns -1. */
int api_fail(api_error *e, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Member k of o when it is present and not null, else NULL. */
const cJSON *get_field(const cJSON *o, const char *k);
/* Member k into *out when present (else *out is left): a number in [lo, hi], an integer in
 * [lo, hi], a boolean; a 400 naming k otherwise. */
int get_number(const cJSON *o, const char *k, double lo, double hi, double *out, api_error *e);
int get_int(const cJSON *o, const char *k, long lo, long hi, long *out, api_error *e);
int get_bool(const cJSON *o, const char *k, bool *out, api_error *e);

#endif
