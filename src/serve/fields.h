/* The request fields' readers (fields.c) and the API's error. */
#ifndef LOOM_SERVE_FIELDS_H
#define LOOM_SERVE_FIELDS_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

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

/* Appends s to the text in *buf (*len bytes of *cap), after a newline unless it is the first;
 * false when out of memory. */
bool text_append(char **buf, size_t *len, size_t *cap, const char *s);
/* A message's content as one string: a string as it is, or an array of parts {"type": T,
 * "text": S} with T one of types (NULL-terminated), joined by newlines. NULL with *bad: the
 * index of the first part that is not such a part, -1 when content is neither a string nor an
 * array, -2 when out of memory. */
char *text_of_parts(const cJSON *content, const char *const *types, int *bad);

#endif
