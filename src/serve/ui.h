/* The chat page at / (ui.c). */
#ifndef LOOM_SERVE_UI_H
#define LOOM_SERVE_UI_H
#include <stddef.h>

/* ui/chat.html's bytes, embedded in the binary. */
const char *ui_chat_page(size_t *len);

#endif
