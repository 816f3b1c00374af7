/* UTF-8 (see utf8.h). */
#include "util/utf8.h"

uint32_t u8decode(const char *s, size_t *len) {
    const uint8_t *u = (const uint8_t *)s;
    *len = u8len(u[0]);
    switch (*len) {
    case 1: return u[0];
    case 2: return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    case 3: return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    default:
        return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 |
               (u[3] & 0x3F);
    }
}

size_t u8encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | c >> 12);
    out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3; /* only used for code points below 0x10000 */
}

int u8check(const uint8_t *s, size_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        uint8_t c = s[i];
        if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return -i;
    }
    return need + 1;
}

size_t u8invalid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int r = u8check((const uint8_t *)s + i, n - i);
        if (r <= 0) return i;
        i += (size_t)r;
    }
    return n;
}
