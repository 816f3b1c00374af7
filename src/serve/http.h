/* The HTTP front (http.c). */
#ifndef LOOM_SERVE_HTTP_H
#define LOOM_SERVE_HTTP_H
#include "serve/server.h"

/* The HTTP front: starts listening (printing the address), returns NULL with err on failure. */
typedef struct http_front http_front;
http_front *http_start(server *srv, loom_err *err);
void http_stop(http_front *h);

#endif
