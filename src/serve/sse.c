/* Server-sent events, the wire format of every API's streams: an optional "event:" line naming
 * the event (Anthropic's and the Responses API's), then one "data:" line of JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "util/alloc.h"

bool sse_event(sse_buf *b, const char *name, char *json) {
    size_t need = b->len + (name ? strlen(name) + 8 : 0) + (json ? strlen(json) : 0) + 9;
    bool ok = json && !ARRAY_RESERVE(b->out, b->cap, need, "a stream's events", NULL);
    if (ok && name) b->len += (size_t)sprintf(b->out + b->len, "event: %s\n", name);
    if (ok) b->len += (size_t)sprintf(b->out + b->len, "data: %s\n\n", json);
    free(json);
    return ok;
}
