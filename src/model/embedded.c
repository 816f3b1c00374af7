/* Embeds models/stories260K into the library with the assembler's .incbin; the folder comes
 * from the build (LOOM_DEFAULT_MODEL_DIR). Data is 64-byte aligned so tensors can be used in
 * place, as from an mmap. The labels are declared hidden so that the compiler addresses them
 * PC-relative: through the GOT (what aarch64 PIE code does for extern data) the assembler
 * turns these local labels into .rodata + offset, and the linker gives every offset .rodata's
 * one GOT entry (all six pointers equal, every file empty). */
#include "model/embedded.h"

#define EMBED(sym, file)                                                                                               \
    __asm__(".section .rodata\n.balign 64\n" #sym "_start:\n.incbin \"" LOOM_DEFAULT_MODEL_DIR "/" file "\"\n" #sym    \
            "_end:\n.byte 0\n.previous\n");                                                                            \
    __attribute__((visibility("hidden"))) extern const unsigned char sym##_start[] __asm__(#sym "_start"),             \
        sym##_end[] __asm__(#sym "_end");

EMBED(loom_default_config, "config.json")
EMBED(loom_default_safetensors, "model.safetensors")
EMBED(loom_default_tokenizer, "tokenizer.json")

embedded_file embedded_get(embedded_id id) {
    switch (id) {
    case EMBEDDED_CONFIG:
        return (embedded_file){loom_default_config_start,
                               (size_t)(loom_default_config_end - loom_default_config_start)};
    case EMBEDDED_SAFETENSORS:
        return (embedded_file){loom_default_safetensors_start,
                               (size_t)(loom_default_safetensors_end - loom_default_safetensors_start)};
    case EMBEDDED_TOKENIZER: break;
    }
    return (embedded_file){loom_default_tokenizer_start,
                           (size_t)(loom_default_tokenizer_end - loom_default_tokenizer_start)};
}
