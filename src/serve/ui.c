/* The chat page a browser gets at / (ui/chat.html, hand-written HTML, CSS and JavaScript),
 * embedded in the binary so that the server needs no files and no build step at run time.
 * The page uses only the public API; --no-ui leaves / unrouted. */
#include "serve/ui.h"

#include "util/embed.h"

LOOM_EMBED(loom_chat_page, LOOM_UI_DIR "/chat.html")

const char *ui_chat_page(size_t *len) {
    *len = (size_t)(loom_chat_page_end - loom_chat_page_start);
    return (const char *)loom_chat_page_start;
}
