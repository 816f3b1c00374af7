/* Building a tokenizer from the vocabulary a GGUF file carries (tokenizer_vocab: token strings,
 * types, scores, merges, special ids, flags) rather than from a tokenizer.json. Owns the mapping
 * from llama.cpp's tokenizer names to Hugging Face tokenizer parts: the pre-tokenizer splits named
 * by tokenizer.ggml.pre, SentencePiece's normalizer and decoder, the added tokens from the token
 * types, and merges derived from the scores where a SentencePiece vocabulary has none.
 *
 * It builds the cJSON tree a tokenizer.json from transformers' GGUF conversion would hold and
 * hands it to tokenizer_load.c, so encoding and decoding are the same code as for a Hugging Face
 * folder. Hand-written because no C library builds a tokenizer from GGUF arrays; the splits are the
 * regexes of the models' own tokenizer.json files (as llama.cpp's src/llama-vocab.cpp and
 * transformers' integrations/gguf name them), and a name not in the table is refused, not guessed.
 *
 * Where transformers and llama.cpp differ, llama.cpp (and the model's own tokenizer.json) wins:
 * SentencePiece text gets its space prefix from a normalizer (also after each added token), the
 * Llama-3 family ignores merges for whole-vocab words, and a missing add_bos_token follows
 * llama.cpp's default for the name. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "text/tokenizer_impl.h"

#define SPIECE     "\xE2\x96\x81" /* U+2581, SentencePiece's space */
#define MAX_TOKENS (1 << 24)

/* ---------------------------------------------------------------- the pre-tokenizer table */

#define CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
static const char LLAMA3[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN35[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
#define UPPERISH "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWERISH "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
static const char GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "*" LOWERISH "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "+" LOWERISH
    "*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
static const char TEKKEN[] = "[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "*" LOWERISH "+|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH
                             "+" LOWERISH "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* DeepSeek LLM: letters that have case, as its tokenizer.json lists them */
static const char DEEPSEEK_LATIN[] =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{29"
    "3}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\"
    "x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{5"
    "56}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CB"
    "F}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D"
    "}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-"
    "\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\"
    "x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x"
    "{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212"
    "A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}"
    "\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\"
    "x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x"
    "{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x"
    "{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{1"
    "18A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
static const char DEEPSEEK_PUNCT[] =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
static const char DEEPSEEK_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
static const char DEEPSEEK3_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
static const char DEEPSEEK3_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Falcon: HF's Punctuation (ASCII punctuation and Unicode P) before the GPT-2 split */
static const char FALCON_PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]+";

/* What a GPT2 vocabulary's tokenizer.ggml.pre turns into: Split(regex, isolated) for each of
 * `before`, then ByteLevel (with the GPT-2 regex when gpt2_regex), then a Split for each of
 * `after`. */
typedef struct {
    const char *names; /* space separated */
    const char *before[6], *after[2];
    bool gpt2_regex;
    bool ignore_merges; /* the model's tokenizer.json sets it (llama.cpp too) */
    bool add_bos;       /* llama.cpp's default when add_bos_token is absent */
} pre_def;

static const pre_def PRES[] = {
    {"default gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert mpt olmo jais "
     "trillion granite-docling exaone4 jina-v1-en jina-v2-code roberta-bpe",
     {NULL},
     {NULL},
     true,
     false,
     false},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     {LLAMA3},
     {NULL},
     false,
     true,
     true},
    {"dbrx smaug-bpe", {LLAMA3}, {NULL}, false, false, false},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez", {QWEN2}, {NULL}, false, false, false},
    {"qwen35", {QWEN35}, {NULL}, false, false, false},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", {GPT4O}, {NULL}, false, false, false},
    {"tekken", {TEKKEN}, {NULL}, false, true, true},
    /* HF's Digits(individual_digits) before the GPT-2 split */
    {"starcoder refact command-r smollm codeshell exaone minerva-7b", {"\\p{N}"}, {NULL}, true, false, false},
    {"falcon", {FALCON_PUNCT}, {"\\p{N}+", "[0-9][0-9][0-9]"}, true, false, false},
    {"deepseek-llm",
     {"[\\r\\n]", DEEPSEEK_LATIN, DEEPSEEK_PUNCT, "\\s+$", DEEPSEEK_CJK, "\\p{N}+"},
     {NULL},
     false,
     false,
     false},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"}, {NULL}, false, false, false},
    {"deepseek-v3", {"\\p{N}{1,3}", DEEPSEEK3_CJK, DEEPSEEK3_MAIN}, {NULL}, false, false, false},
};

static const pre_def *find_pre(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof PRES / sizeof *PRES; i++)
        for (const char *s = PRES[i].names; *s;) {
            size_t k = strcspn(s, " ");
            if (k == n && !memcmp(s, name, n)) return &PRES[i];
            s += k + (s[k] == ' ');
        }
    return NULL;
}

/* llama.cpp's default for a flag the file does not state */
static bool flag(signed char f, bool def) { return f < 0 ? def : f > 0; }

/* ---------------------------------------------------------------- token strings */

/* The token strings as the tree spells them (respelled where needed), NUL-terminated in one
 * buffer, and a table from string to the last id spelling it (a later duplicate wins, as in a
 * Python dict and llama.cpp's map). */
typedef struct {
    strbuf buf;
    size_t *off, *len; /* [n] */
    size_t n;
    uint32_t *slot, mask; /* 1 + id, 0 empty */
} strs;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static const char *str_at(const strs *t, size_t i) { return t->buf.p + t->off[i]; }

static int32_t strs_find(const strs *t, const char *s, size_t n) {
    for (uint32_t h = (uint32_t)fnv(s, n) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slot[h];
        if (!v) return -1;
        if (t->len[v - 1] == n && !memcmp(str_at(t, v - 1), s, n)) return (int32_t)(v - 1);
    }
}

static void strs_index(strs *t) {
    for (size_t i = 0; i < t->n; i++) {
        uint32_t h = (uint32_t)fnv(str_at(t, i), t->len[i]) & t->mask;
        while (t->slot[h] &&
               !(t->len[t->slot[h] - 1] == t->len[i] && !memcmp(str_at(t, t->slot[h] - 1), str_at(t, i), t->len[i])))
            h = (h + 1) & t->mask;
        t->slot[h] = (uint32_t)i + 1;
    }
}

static void strs_free(strs *t) {
    free(t->buf.p);
    free(t->off);
    free(t->len);
    free(t->slot);
}

/* GPT-2's byte alphabet: byte b is spelled as code point byte_cp(b). */
static uint32_t byte_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (uint32_t)b;
    int extra = 0;
    for (int c = 0; c < b; c++) extra += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
    return 256 + (uint32_t)extra;
}

/* Whether s is all code points of the byte alphabet (valid UTF-8 assumed checked). */
static bool in_byte_alphabet(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t c = u8decode(s + i, &k);
        if (c > 323 || (c < 256 && !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174))) return false;
        i += k;
    }
    return true;
}

/* Python's str.isspace for one code point. */
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Gemma 1-3 files store a token of spaces as real spaces where the model spells them U+2581: the
 * number of code points of a whitespace-only token holding a space, or 0. */
static size_t gemma_spaces(const char *s, size_t n) {
    size_t cps = 0;
    bool space = false;
    for (size_t i = 0; i < n; cps++) {
        size_t k;
        uint32_t c = u8decode(s + i, &k);
        if (!py_space(c)) return 0;
        space |= c == ' ';
        i += k;
    }
    return space ? cps : 0;
}

static int32_t type_of_id(const tokenizer_vocab *v, size_t i) { return v->types ? v->types[i] : TOKEN_TYPE_NORMAL; }

static int load_strs(const tokenizer_vocab *v, bool gemma, strs *t, loom_err *err) {
    t->n = v->n_tokens;
    uint32_t size = 16;
    while (size < 2 * t->n) size *= 2;
    t->mask = size - 1;
    if (!(t->off = mem_array(t->n, sizeof *t->off, "token offsets", err)) ||
        !(t->len = mem_array(t->n, sizeof *t->len, "token lengths", err)) ||
        !(t->slot = mem_zalloc(size, sizeof *t->slot, "the token table", err)))
        return -1;
    for (size_t i = 0; i < t->n; i++) {
        const char *s = v->tokens[i].p;
        size_t n = v->tokens[i].n;
        if (n && !s) return loom_errf(err, "tokenizer.ggml.tokens[%zu]: no string", i);
        if (u8invalid(s, n) != n) return loom_errf(err, "tokenizer.ggml.tokens[%zu]: invalid UTF-8", i);
        t->off[i] = t->buf.n;
        int32_t type = type_of_id(v, i);
        bool added = type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_USER_DEFINED || type == TOKEN_TYPE_UNKNOWN;
        size_t spaces = gemma ? gemma_spaces(s, n) : 0;
        if (v->kind == TOKENIZER_VOCAB_GPT2 && !added && !in_byte_alphabet(s, n)) {
            /* transformers respells such a token in the byte alphabet */
            for (size_t k = 0; k < n; k++) {
                char u[4];
                if (sb_put(&t->buf, u, u8encode(byte_cp((uint8_t)s[k]), u), err)) return -1;
            }
        } else if (spaces) {
            for (size_t k = 0; k < spaces; k++)
                if (sb_put(&t->buf, SPIECE, 3, err)) return -1;
        } else if (sb_put(&t->buf, s, n, err)) {
            return -1;
        }
        t->len[i] = t->buf.n - t->off[i];
        if (sb_put(&t->buf, "", 1, err)) return -1;
    }
    strs_index(t);
    return 0;
}

/* Whether id i is the one its string maps to (not shadowed by a later duplicate) and can be a
 * JSON key (no NUL byte). */
static bool live(const strs *t, size_t i) {
    return t->len[i] && strlen(str_at(t, i)) == t->len[i] && strs_find(t, str_at(t, i), t->len[i]) == (int32_t)i;
}

/* ---------------------------------------------------------------- merges */

/* Appends the merge (l, r) as "l r", or as the pair ["l", "r"] when a part holds a space. */
static int add_merge(cJSON *list, strbuf *tmp, const char *l, size_t ln, const char *r, size_t rn, loom_err *err) {
    bool pair = memchr(l, ' ', ln) || memchr(r, ' ', rn);
    tmp->n = 0;
    if (sb_put(tmp, l, ln, err) || sb_put(tmp, pair ? "" : " ", 1, err) || sb_put(tmp, r, rn, err) ||
        sb_put(tmp, "", 1, err))
        return -1;
    cJSON *m = pair ? cJSON_CreateArray() : cJSON_CreateString(tmp->p);
    if (m && pair) {
        cJSON_AddItemToArray(m, cJSON_CreateString(tmp->p));
        cJSON_AddItemToArray(m, cJSON_CreateString(tmp->p + ln + 1));
    }
    if (!m || (pair && cJSON_GetArraySize(m) != 2) || !cJSON_AddItemToArray(list, m)) {
        cJSON_Delete(m);
        return loom_errf(err, "out of memory building the merges");
    }
    return 0;
}

/* The file's merges, "left right" split at the first space after the first byte as llama.cpp
 * does; one whose parts or concatenation are not tokens can never apply and is left out. */
static int file_merges(const tokenizer_vocab *v, const strs *t, cJSON *list, loom_err *err) {
    strbuf cat = {0}, tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < v->n_merges && !rc; i++) {
        const char *s = v->merges[i].p;
        size_t n = v->merges[i].n;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp || sp + 1 == s + n) continue;
        size_t ln = (size_t)(sp - s), rn = n - ln - 1;
        cat.n = 0;
        if (sb_put(&cat, s, ln, err) || sb_put(&cat, sp + 1, rn, err)) {
            rc = -1;
            break;
        }
        if (strs_find(t, s, ln) < 0 || strs_find(t, sp + 1, rn) < 0 || strs_find(t, cat.p, cat.n) < 0) continue;
        rc = add_merge(list, &tmp, s, ln, sp + 1, rn, err);
    }
    free(cat.p);
    free(tmp.p);
    return rc;
}

typedef struct {
    float score;
    uint32_t lcp, rcp; /* code points of the parts */
    uint32_t pos;      /* where the merged token first appears */
    int32_t l, r;      /* ids of the parts */
    int32_t m;         /* id of the merged token */
    uint32_t lbytes;   /* bytes of the left part */
} cand;

/* transformers' generate_merges order: score high first, then longer left part, longer right
 * part, then the token's place and the parts' ids. */
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->lcp != b->lcp) return a->lcp > b->lcp ? -1 : 1;
    if (a->rcp != b->rcp) return a->rcp > b->rcp ? -1 : 1;
    if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
    if (a->l != b->l) return a->l < b->l ? -1 : 1;
    return (a->r > b->r) - (a->r < b->r);
}

/* SentencePiece merges: every split of a token into two tokens, ranked by the token's score (Gemma
 * 1-3: by its place in the file, as transformers does), so BPE merges in SentencePiece's order. */
static int derived_merges(const tokenizer_vocab *v, const strs *t, bool by_position, cJSON *list, loom_err *err) {
    cand *c = NULL;
    size_t nc = 0, cap = 0;
    bool *done = mem_zalloc(t->n ? t->n : 1, sizeof *done, "the merge derivation", err);
    int rc = done ? 0 : -1;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const char *s = str_at(t, i);
        size_t n = t->len[i];
        int32_t last = strs_find(t, s, n);
        if (last < 0 || done[last]) continue;
        done[last] = true;
        float score = by_position ? -(float)last : v->scores[last];
        uint32_t cps = 0;
        for (size_t k = 0; k < n; k += u8len((uint8_t)s[k])) cps++;
        uint32_t lcp = 0;
        for (size_t k = 0; k < n;) {
            k += u8len((uint8_t)s[k]);
            lcp++;
            if (k >= n) break;
            int32_t l = strs_find(t, s, k), r = l >= 0 ? strs_find(t, s + k, n - k) : -1;
            if (r < 0) continue;
            if (ARRAY_RESERVE(c, cap, nc + 1, "the derived merges", err)) {
                rc = -1;
                break;
            }
            c[nc++] = (cand){score, lcp, cps - lcp, (uint32_t)i, l, r, last, (uint32_t)k};
        }
    }
    if (!rc) qsort(c, nc, sizeof *c, cand_cmp);
    strbuf tmp = {0};
    for (size_t k = 0; k < nc && !rc; k++) {
        const char *s = str_at(t, (size_t)c[k].m);
        size_t n = t->len[c[k].m];
        rc = add_merge(list, &tmp, s, c[k].lbytes, s + c[k].lbytes, n - c[k].lbytes, err);
    }
    free(tmp.p);
    free(c);
    free(done);
    return rc;
}

/* ---------------------------------------------------------------- the tree */

/* cJSON reports no allocation failure on the Add calls we use; a NULL anywhere is caught by
 * checking the finished tree's parts (`ok`). */
static cJSON *obj(cJSON *parent, const char *key) {
    cJSON *o = cJSON_CreateObject();
    if (o && parent && !cJSON_AddItemToObject(parent, key, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *typed(cJSON *list, const char *type) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "type", type);
    if (list && !cJSON_AddItemToArray(list, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void add_split(cJSON *list, const char *regex) {
    cJSON *o = typed(list, "Split");
    if (!o) return;
    cJSON_AddStringToObject(obj(o, "pattern"), "Regex", regex);
    cJSON_AddStringToObject(o, "behavior", "Isolated");
    cJSON_AddBoolToObject(o, "invert", false);
}

static void add_replace(cJSON *list, const char *from, const char *to) {
    cJSON *o = typed(list, "Replace");
    if (!o) return;
    cJSON_AddStringToObject(obj(o, "pattern"), "String", from);
    cJSON_AddStringToObject(o, "content", to);
}

static void add_bytelevel(cJSON *list, bool regex) {
    cJSON *o = typed(list, "ByteLevel");
    if (!o) return;
    cJSON_AddBoolToObject(o, "add_prefix_space", false);
    cJSON_AddBoolToObject(o, "use_regex", regex);
}

static cJSON *sequence(cJSON *root, const char *key, const char *list_key, cJSON **list) {
    cJSON *o = obj(root, key);
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "type", "Sequence");
    *list = cJSON_AddArrayToObject(o, list_key);
    return o;
}

/* normalizer, pre_tokenizer and decoder */
static void add_pipeline(const tokenizer_vocab *v, const pre_def *pre, cJSON *root) {
    cJSON *list = NULL;
    bool space_prefix = flag(v->add_space_prefix, v->kind == TOKENIZER_VOCAB_SPM);
    if (v->kind == TOKENIZER_VOCAB_GPT2) {
        sequence(root, "pre_tokenizer", "pretokenizers", &list);
        for (int i = 0; i < 6 && pre->before[i]; i++) add_split(list, pre->before[i]);
        add_bytelevel(list, pre->gpt2_regex);
        for (int i = 0; i < 2 && pre->after[i]; i++) add_split(list, pre->after[i]);
        cJSON_AddItemToObject(root, "decoder", typed(NULL, "ByteLevel"));
        return;
    }
    /* SentencePiece: spaces become U+2581, with one in front of the text when add_space_prefix
     * (llama.cpp: of each run of text after an added token too, as HF's Prepend normalizer) */
    sequence(root, "normalizer", "normalizers", &list);
    if (space_prefix) cJSON_AddStringToObject(typed(list, "Prepend"), "prepend", SPIECE);
    add_replace(list, " ", SPIECE);
    if (v->kind == TOKENIZER_VOCAB_GEMMA4) { /* merges never cross a newline (llama.cpp's split) */
        sequence(root, "pre_tokenizer", "pretokenizers", &list);
        add_split(list, "[^\\n]+|[\\n]+");
    }
    sequence(root, "decoder", "decoders", &list);
    add_replace(list, SPIECE, " ");
    typed(list, "ByteFallback");
    typed(list, "Fuse");
    if (space_prefix) {
        cJSON *o = typed(list, "Strip");
        cJSON_AddStringToObject(o, "content", " ");
        cJSON_AddNumberToObject(o, "start", 1);
        cJSON_AddNumberToObject(o, "stop", 0);
    }
}

/* Control and unknown tokens (and the special ids) are special added tokens, user-defined ones
 * plain added tokens: both are matched whole in the text, as llama.cpp and transformers do. */
static void add_added(const tokenizer_vocab *v, const strs *t, cJSON *root) {
    cJSON *list = cJSON_AddArrayToObject(root, "added_tokens");
    for (size_t i = 0; i < t->n; i++) {
        int32_t type = type_of_id(v, i), id = (int32_t)i;
        bool special = type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_UNKNOWN || id == v->bos || id == v->eos ||
                       id == v->unk || id == v->pad;
        if ((!special && type != TOKEN_TYPE_USER_DEFINED) || !live(t, i)) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", id);
        cJSON_AddStringToObject(o, "content", str_at(t, i));
        cJSON_AddBoolToObject(o, "special", special);
        cJSON_AddBoolToObject(o, "normalized", false);
        cJSON_AddItemToArray(list, o);
    }
}

static void add_template_token(cJSON *single, cJSON *specials, const char *name, int32_t id) {
    cJSON *item = cJSON_CreateObject(), *sp = cJSON_CreateObject();
    cJSON_AddStringToObject(obj(item, "SpecialToken"), "id", name);
    cJSON_AddItemToArray(single, item);
    cJSON_AddStringToObject(sp, "id", name);
    cJSON_AddItemToObject(sp, "ids", cJSON_CreateIntArray(&(int){id}, 1));
    cJSON_AddItemToObject(specials, name, sp);
}

/* BOS before and EOS after the text, as add_bos_token and add_eos_token say. */
static void add_post(const tokenizer_vocab *v, bool add_bos, cJSON *root) {
    if (!add_bos && v->add_eos <= 0) return;
    cJSON *post = obj(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(post, "single"), *specials = obj(post, "special_tokens");
    if (add_bos) add_template_token(single, specials, "BOS", v->bos);
    cJSON *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(obj(seq, "Sequence"), "id", "A");
    cJSON_AddItemToArray(single, seq);
    if (v->add_eos > 0) add_template_token(single, specials, "EOS", v->eos);
}

static int check_id(int32_t id, size_t n, const char *key, loom_err *err) {
    if (id < -1 || (id >= 0 && (size_t)id >= n))
        return loom_errf(err, "tokenizer.ggml.%s: id %d is out of range (%zu tokens)", key, id, n);
    return 0;
}

static int check(const tokenizer_vocab *v, const pre_def **pre, loom_err *err) {
    if (!v->n_tokens || !v->tokens) return loom_errf(err, "tokenizer.ggml.tokens: missing or empty");
    if (v->n_tokens >= MAX_TOKENS)
        return loom_errf(err, "tokenizer.ggml.tokens: %zu tokens (at most %d)", v->n_tokens, MAX_TOKENS - 1);
    if (check_id(v->bos, v->n_tokens, "bos_token_id", err) || check_id(v->eos, v->n_tokens, "eos_token_id", err) ||
        check_id(v->unk, v->n_tokens, "unknown_token_id", err) ||
        check_id(v->pad, v->n_tokens, "padding_token_id", err))
        return -1;
    if (v->add_eos > 0 && v->eos < 0)
        return loom_errf(err, "tokenizer.ggml.add_eos_token is set but there is no eos_token_id");
    *pre = NULL;
    if (v->kind == TOKENIZER_VOCAB_GPT2) {
        const char *name = v->pre ? v->pre : "default";
        if (!(*pre = find_pre(name)))
            return loom_errf(err, "tokenizer.ggml.pre: unsupported pre-tokenizer \"%s\"", name);
    } else if (v->kind != TOKENIZER_VOCAB_SPM && v->kind != TOKENIZER_VOCAB_GEMMA4) {
        return loom_errf(err, "unknown vocabulary kind %d", (int)v->kind);
    }
    if (v->kind == TOKENIZER_VOCAB_SPM && !v->merges && !v->scores)
        return loom_errf(err, "tokenizer.ggml.scores: missing (a SentencePiece vocabulary without merges needs them)");
    if (v->kind != TOKENIZER_VOCAB_SPM && !v->merges)
        return loom_errf(err, "tokenizer.ggml.merges: missing (a BPE vocabulary needs them)");
    return 0;
}

static int build(const tokenizer_vocab *v, const pre_def *pre, const strs *t, cJSON *root, loom_err *err) {
    bool gemma = v->arch && !strncmp(v->arch, "gemma", 5) && strlen(v->arch) <= 6;
    cJSON *model = obj(root, "model"), *vocab = obj(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    if (!vocab || !merges) return loom_errf(err, "out of memory building the vocabulary");
    cJSON_AddStringToObject(model, "type", "BPE");
    bool spm = v->kind != TOKENIZER_VOCAB_GPT2;
    cJSON_AddBoolToObject(model, "byte_fallback", spm);
    cJSON_AddBoolToObject(model, "fuse_unk", spm);
    cJSON_AddBoolToObject(model, "ignore_merges", pre && pre->ignore_merges);
    if (spm && v->unk >= 0 && live(t, (size_t)v->unk))
        cJSON_AddStringToObject(model, "unk_token", str_at(t, (size_t)v->unk));
    for (size_t i = 0; i < t->n; i++) {
        if (!live(t, i)) continue;
        cJSON *id = cJSON_CreateNumber((double)i);
        if (!id || !cJSON_AddItemToObject(vocab, str_at(t, i), id)) {
            cJSON_Delete(id);
            return loom_errf(err, "out of memory building the vocabulary");
        }
    }
    if (v->merges ? file_merges(v, t, merges, err) : derived_merges(v, t, gemma, merges, err)) return -1;
    add_pipeline(v, pre, root);
    add_added(v, t, root);
    /* llama.cpp adds BOS to a SentencePiece vocabulary, and for some names, unless told not to */
    bool add_bos = flag(v->add_bos, v->kind == TOKENIZER_VOCAB_SPM || (pre && pre->add_bos));
    if (add_bos && v->bos < 0)
        return loom_errf(err, "tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
    add_post(v, add_bos, root);
    return 0;
}

tokenizer *tokenizer_load_vocab(const tokenizer_vocab *v, const char *name, loom_err *err) {
    const pre_def *pre = NULL;
    strs t = {0};
    cJSON *root = NULL;
    tokenizer *tok = NULL;
    bool gemma = v->arch && !strncmp(v->arch, "gemma", 5) && strlen(v->arch) <= 6;
    int rc = check(v, &pre, err) || load_strs(v, gemma && v->kind == TOKENIZER_VOCAB_SPM, &t, err);
    if (!rc && !(root = cJSON_CreateObject())) rc = loom_errf(err, "out of memory building the tokenizer");
    if (!rc) rc = build(v, pre, &t, root, err);
    if (rc) loom_err_prefix(err, "%s", name);
    else tok = tokenizer_load_tree(root, name, err);
    cJSON_Delete(root);
    strs_free(&t);
    return tok;
}
