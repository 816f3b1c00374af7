/* UTF-8: decoding and encoding code points, and the well-formedness checks that the
 * tokenizer's input validation, its decoder's lossy byte handling and the chat templates'
 * string functions are built on. */
#ifndef LOOM_UTIL_UTF8_H
#define LOOM_UTIL_UTF8_H
#include <stddef.h>
#include <stdint.h>

/* Length of the UTF-8 sequence led by b, for text already known to be well formed. */
static inline size_t u8len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
/* The code point at s (well formed), its length in *len. */
uint32_t u8decode(const char *s, size_t *len);
/* Writes c (below 0x10000) as UTF-8; returns the length. */
size_t u8encode(uint32_t c, char *out);
/* Well-formedness of s[0..n) at its start (Unicode table 3-7): the length of a complete sequence,
 * 0 when s is a valid but unfinished start of one, or -k when its first k bytes are a maximal
 * invalid subpart (Rust's from_utf8_lossy turns each such subpart into one U+FFFD). */
int u8check(const uint8_t *s, size_t n);
/* Offset of the first byte of s that does not belong to well-formed UTF-8, or n. */
size_t u8invalid(const char *s, size_t n);

#endif
