/* File helpers (see file.h). */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/err.h"

char *file_read_all(const char *path, size_t *len, loom_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        loom_errf(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) { /* cap + 1 leaves room for the NUL */
        if (ARRAY_RESERVE(buf, cap, n + ((size_t)1 << 16) + 1, "the file's contents", err)) {
            free(buf);
            fclose(f);
            loom_err_prefix(err, "%s", path);
            return NULL;
        }
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        loom_errf(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int file_map_open(file_map *m, const char *path, loom_err *err) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return loom_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return loom_errf(err, "%s: not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return loom_errf(err, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
    }
    close(fd);
    return 0;
}

void file_map_close(file_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    memset(m, 0, sizeof *m);
}
