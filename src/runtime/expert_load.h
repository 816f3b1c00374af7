/* Expert load profiles (expert_load.c; loom_expert_load in loom.h). */
#ifndef LOOM_RUNTIME_EXPERT_LOAD_H
#define LOOM_RUNTIME_EXPERT_LOAD_H
#include "loom.h"

/* A profile from the JSON text[0..len) (untrusted: every field checked); errors name path and
 * the field. */
loom_expert_load *expert_load_parse(const char *text, size_t len, const char *path, loom_err *err);

#endif
