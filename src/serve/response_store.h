/* The Responses API's store (response_store.c). */
#ifndef LOOM_SERVE_RESPONSE_STORE_H
#define LOOM_SERVE_RESPONSE_STORE_H
#include <stdbool.h>
#include <stddef.h>

#include "loom.h"

typedef struct response_store response_store;

/* A store of at most max_bytes (ids, conversations and bodies counted); NULL with err when out
 * of memory. */
response_store *response_store_new(size_t max_bytes, loom_err *err);
void response_store_free(response_store *s);
/* Keeps copies of a response's conversation (chat messages, JSON, its output last) and body
 * under id, dropping the least recently used past the bound; false when it cannot (larger than
 * the whole bound, or out of memory). Thread-safe, as are the others. */
bool response_store_put(response_store *s, const char *id, const char *conversation, const char *body);
/* A malloc'd copy of id's conversation (body false) or body; NULL when it is not stored (never,
 * or dropped) or out of memory. A hit makes it the most recently used. */
char *response_store_get(response_store *s, const char *id, bool body);
/* Bytes and responses held. */
void response_store_usage(response_store *s, size_t *bytes, int *count);

#endif
