/* Whole-file reading and read-only mapping, with errors that name the path. */
#ifndef LOOM_UTIL_FILE_H
#define LOOM_UTIL_FILE_H
#include "loom.h"

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
char *file_read_all(const char *path, size_t *len, loom_err *err);

typedef struct file_map {
    const void *data;
    size_t size;
} file_map;
/* Maps a file read-only (private, never written). An empty file maps to size 0. */
int file_map_open(file_map *m, const char *path, loom_err *err);
void file_map_close(file_map *m);

#endif
