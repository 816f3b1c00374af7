/* Files embedded into the library with the assembler's .incbin (the model, the chat page).
 * Data is 64-byte aligned so tensors can be used in place, as from an mmap, and followed by a
 * NUL. The labels are declared hidden so that the compiler addresses them PC-relative: through
 * the GOT (what aarch64 PIE code does for extern data) the assembler turns these local labels
 * into .rodata + offset, and the linker gives every offset .rodata's one GOT entry (all the
 * pointers equal, every file empty). */
#ifndef LOOM_UTIL_EMBED_H
#define LOOM_UTIL_EMBED_H

/* sym_start[] .. sym_end[]: the bytes of the file at path (a string literal, absolute). */
#define LOOM_EMBED(sym, path)                                                                                          \
    __asm__(".section .rodata\n.balign 64\n" #sym "_start:\n.incbin \"" path "\"\n" #sym                               \
            "_end:\n.byte 0\n.previous\n");                                                                            \
    __attribute__((visibility("hidden"))) extern const unsigned char sym##_start[] __asm__(#sym "_start"),             \
        sym##_end[] __asm__(#sym "_end");

#endif
