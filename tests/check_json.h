/* Reading a JSON oracle file in a test: a failure to read or parse it is a test failure. */
#ifndef LOOM_TESTS_CHECK_JSON_H
#define LOOM_TESTS_CHECK_JSON_H
#include <cjson/cJSON.h>

#include "check.h"
#include "util/file.h"

static inline cJSON *read_json(const char *path) {
    loom_err err = {{0}};
    char *s = file_read_all(path, NULL, &err);
    CHECK(s, "%s", err.msg);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    CHECK(j, "%s: not JSON", path);
    return j;
}
#endif
