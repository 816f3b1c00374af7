/* Reading tokenizer.json: each section is validated as it is loaded, so a file we cannot run
 * exactly fails with the field at fault named, rather than tokenizing differently from HF. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "text/tokenizer_impl.h"
#include "util/file.h"

#define MAX_ID (1 << 24) /* a larger id means a broken file, not a big vocabulary */

/* The GPT-2 split used by the ByteLevel pre-tokenizer when use_regex is true. */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust's \w, used by single_word added tokens. */
static const char WORD_PATTERN[] = "[\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}]";

/* Metaspace's default replacement: U+2581, SentencePiece's word marker. */
static const char SPIECE_UNDERLINE[] = "\xE2\x96\x81";

/* ---------------------------------------------------------------- helpers */

/* Power-of-two table size with load factor at most one half. */
static uint32_t table_size(size_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

static pcre2_code *compile_re(const char *src, const char *path, loom_err *err) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        loom_errf(err, "%s: bad regex at offset %zu: %s", path, (size_t)at, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* best effort: the interpreter is the fallback */
    return re;
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jbool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = jget(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}
static bool jnull(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* An integer id in [0, MAX_ID), or -1. */
static int32_t jid(const cJSON *v) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < MAX_ID)) return -1;
    int32_t id = (int32_t)v->valuedouble;
    return (double)id == v->valuedouble ? id : -1;
}

/* A string of exactly one character (HF declares these fields as a Rust char). */
static int jchar(tokenizer *t, const cJSON *o, const char *k, const char *def, const char *path, span *out,
                 loom_err *err) {
    const char *s = jget(o, k) ? jstr(o, k) : def;
    size_t n = s ? strlen(s) : 0;
    if (!n || u8invalid(s, n) != n || u8len((uint8_t)s[0]) != n)
        return loom_errf(err, "%s.%s: expected a single character", path, k);
    return tok_intern(t, s, n, out, err);
}

/* ---------------------------------------------------------------- the model */

static int load_vocab(tokenizer *t, const cJSON *vocab, loom_err *err) {
    if (!cJSON_IsObject(vocab)) return loom_errf(err, "model.vocab: missing or not an object");
    size_t count = 0;
    for (const cJSON *e = vocab->child; e; e = e->next, count++) {
        int32_t id = jid(e);
        if (id < 0) return loom_errf(err, "model.vocab[\"%s\"]: id is not an integer in [0, %d)", e->string, MAX_ID);
        if (id >= t->model_n) t->model_n = id + 1;
    }
    uint32_t size = table_size(count);
    if (!(t->model_str = mem_array((size_t)t->model_n, sizeof *t->model_str, "model.vocab", err)) ||
        !(t->vocab_slot = mem_zalloc(size, sizeof *t->vocab_slot, "the vocab table", err)))
        return -1;
    t->vocab_mask = size - 1;
    for (int32_t i = 0; i < t->model_n; i++) t->model_str[i].off = NONE;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = jid(e);
        if (t->model_str[id].off != NONE) return loom_errf(err, "model.vocab[\"%s\"]: id %d used twice", e->string, id);
        if (tok_intern(t, e->string, strlen(e->string), &t->model_str[id], err)) return -1;
        tok_vocab_add(t, id);
    }
    return 0;
}

/* Ids of a merge's two parts and of their concatenation: 1, or 0 if any is not in the vocab
 * (-1 with err set when out of memory). */
static int merge_parts(const tokenizer *t, strbuf *cat, const char *l, size_t ln, const char *r, size_t rn,
                       int32_t ids[3], loom_err *err) {
    cat->n = 0;
    if (sb_put(cat, l, ln, err) || sb_put(cat, r, rn, err)) return -1;
    ids[0] = tok_vocab_find(t, l, ln);
    ids[1] = tok_vocab_find(t, r, rn);
    ids[2] = tok_vocab_find(t, cat->p, cat->n);
    return ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0;
}

/* Resolves one merges entry: "a b" or ["a", "b"] (the newer pair form). */
static int merge_entry(const tokenizer *t, const cJSON *m, uint32_t i, strbuf *cat, int32_t ids[3], loom_err *err) {
    if (cJSON_IsArray(m)) {
        const cJSON *a = m->child, *b = a ? a->next : NULL;
        if (!cJSON_IsString(a) || !cJSON_IsString(b) || b->next)
            return loom_errf(err, "model.merges[%u]: expected two strings", i);
        int found = merge_parts(t, cat, a->valuestring, strlen(a->valuestring), b->valuestring, strlen(b->valuestring),
                                ids, err);
        if (found <= 0)
            return found < 0
                       ? -1
                       : loom_errf(err,
                                   "model.merges[%u]: [\"%s\", \"%s\"] (or their concatenation) is not in model.vocab",
                                   i, a->valuestring, b->valuestring);
        return 0;
    }
    if (!cJSON_IsString(m)) return loom_errf(err, "model.merges[%u]: expected a string or a pair", i);
    /* HF requires exactly one space. A line with more comes from vocab entries that contain a
     * space (onnxruntime-extensions' Llama-2 copy spells U+00A0 as ' '): take the split whose
     * parts and concatenation are all tokens. */
    const char *s = m->valuestring;
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++) {
        int found = s[k] == ' ' ? merge_parts(t, cat, s, k, s + k + 1, n - k - 1, ids, err) : 0;
        if (found) return found > 0 ? 0 : -1;
    }
    return loom_errf(err, "model.merges[%u]: \"%s\" is not two tokens of model.vocab whose concatenation is one", i, s);
}

static int load_merges(tokenizer *t, const cJSON *merges, loom_err *err) {
    if (!cJSON_IsArray(merges)) return loom_errf(err, "model.merges: missing or not an array");
    size_t count = (size_t)cJSON_GetArraySize(merges);
    uint32_t size = table_size(count);
    if (!(t->pair_key = mem_array(size, sizeof *t->pair_key, "the merge table", err)) ||
        !(t->pair_rank = mem_array(size, sizeof *t->pair_rank, "the merge table", err)) ||
        !(t->pair_new = mem_array(size, sizeof *t->pair_new, "the merge table", err)))
        return -1;
    t->pair_mask = size - 1;
    memset(t->pair_key, 0xFF, size * sizeof *t->pair_key);
    strbuf cat = {0};
    uint32_t i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        int32_t ids[3];
        if (merge_entry(t, m, i, &cat, ids, err)) {
            free(cat.p);
            return -1;
        }
        /* A repeated pair keeps its last rank, as HF's HashMap collect does. */
        tok_pair_add(t, ids[0], ids[1], i, ids[2]);
    }
    free(cat.p);
    return 0;
}

static int load_model(tokenizer *t, const cJSON *model, loom_err *err) {
    if (!cJSON_IsObject(model)) return loom_errf(err, "model: missing or not an object");
    const char *type = jstr(model, "type");
    if (!type) return loom_errf(err, "model.type: missing");
    if (strcmp(type, "BPE")) return loom_errf(err, "model.type: unsupported \"%s\" (only \"BPE\" models)", type);
    if (load_vocab(t, jget(model, "vocab"), err) || load_merges(t, jget(model, "merges"), err)) return -1;
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = jstr(model, affix[i]);
        if (s && *s) return loom_errf(err, "model.%s: \"%s\" is not supported", affix[i], s);
    }
    /* dropout randomizes merges for training; inference merges fully, as HF does without it. */
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    const char *unk = jstr(model, "unk_token");
    t->unk.off = NONE;
    t->unk_id = -1;
    if (unk) {
        if (tok_intern(t, unk, strlen(unk), &t->unk, err)) return -1;
        t->unk_id = tok_vocab_find(t, unk, strlen(unk));
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tok_vocab_find(t, name, 6);
    }
    return 0;
}

/* ---------------------------------------------------------------- the pipeline */

static int load_pattern(tokenizer *t, const cJSON *p, const char *path, pattern *out, loom_err *err) {
    char sub[256];
    const char *s;
    if ((s = jstr(p, "String"))) {
        if (!*s) return loom_errf(err, "%s.String: empty", path);
        return tok_intern(t, s, strlen(s), &out->lit, err);
    }
    if ((s = jstr(p, "Regex"))) {
        snprintf(sub, sizeof sub, "%s.Regex", path);
        return (out->re = compile_re(s, sub, err)) ? 0 : -1;
    }
    return loom_errf(err, "%s: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

/* Calls load on each element of o[key] (a list), naming it path.key[i] in errors. */
static int load_list(tokenizer *t, const cJSON *o, const char *key, const char *path,
                     int (*load)(tokenizer *, const cJSON *, const char *, loom_err *), loom_err *err) {
    const cJSON *list = jget(o, key);
    if (!cJSON_IsArray(list)) return loom_errf(err, "%s.%s: missing or not a list", path, key);
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%d]", path, key, i);
        if (load(t, c, sub, err)) return -1;
    }
    return 0;
}

static const char *type_of(const cJSON *o, const char *path, loom_err *err) {
    const char *type = jstr(o, "type");
    if (!type) loom_errf(err, "%s.type: missing", path);
    return type;
}

static int load_normalizer(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    char sub[256];
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "normalizers", path, load_normalizer, err);
    /* NFC leaves text that is already NFC unchanged, and prompts almost always are; composing
     * decomposed input needs Unicode tables we do not carry, so such (rare) input can tokenize
     * differently from HF. */
    if (!strcmp(type, "NFC")) return 0;
    if (t->n_norm == MAX_STEPS) return loom_errf(err, "%s: more than %d normalizers", path, MAX_STEPS);
    norm_step *st = &t->norm[t->n_norm++];
    if (!strcmp(type, "Prepend")) {
        const char *s = jstr(o, "prepend");
        st->kind = NORM_PREPEND;
        if (!s) return loom_errf(err, "%s.prepend: missing", path);
        return tok_intern(t, s, strlen(s), &st->str, err);
    }
    if (!strcmp(type, "Replace")) {
        const char *s = jstr(o, "content");
        st->kind = NORM_REPLACE;
        if (!s) return loom_errf(err, "%s.content: missing", path);
        snprintf(sub, sizeof sub, "%s.pattern", path);
        if (tok_intern(t, s, strlen(s), &st->str, err)) return -1;
        return load_pattern(t, jget(o, "pattern"), sub, &st->pat, err);
    }
    return loom_errf(err, "%s.type: unsupported normalizer \"%s\"", path, type);
}

static int load_scheme(const cJSON *o, const char *path, prepend_scheme *out, loom_err *err) {
    const char *s = jstr(o, "prepend_scheme");
    if (!s) { /* older files: add_prefix_space */
        *out = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
        return 0;
    }
    if (!strcmp(s, "always")) *out = PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *out = PREPEND_FIRST;
    else if (!strcmp(s, "never")) *out = PREPEND_NEVER;
    else return loom_errf(err, "%s.prepend_scheme: unknown \"%s\"", path, s);
    return 0;
}

static int load_split(tokenizer *t, const cJSON *o, const char *path, pre_step *st, loom_err *err) {
    static const char *modes[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    char sub[256];
    const char *b = jstr(o, "behavior");
    int m = 0;
    while (m < 5 && (!b || strcmp(b, modes[m]))) m++;
    if (m == 5) return loom_errf(err, "%s.behavior: unknown \"%s\"", path, b ? b : "(missing)");
    st->kind = PRE_SPLIT;
    st->mode = (split_mode)m;
    st->invert = jbool(o, "invert", false);
    snprintf(sub, sizeof sub, "%s.pattern", path);
    return load_pattern(t, jget(o, "pattern"), sub, &st->pat, err);
}

static int load_pretok(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "pretokenizers", path, load_pretok, err);
    if (t->n_pre == MAX_STEPS) return loom_errf(err, "%s: more than %d pre-tokenizers", path, MAX_STEPS);
    pre_step *st = &t->pre[t->n_pre++];
    if (!strcmp(type, "ByteLevel")) {
        st->kind = PRE_BYTELEVEL;
        st->prefix_space = jbool(o, "add_prefix_space", true);
        if (jbool(o, "use_regex", true) && !(st->pat.re = compile_re(GPT2_PATTERN, path, err))) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) return load_split(t, o, path, st, err);
    if (!strcmp(type, "Metaspace")) {
        st->kind = PRE_METASPACE;
        st->split = jbool(o, "split", true);
        if (jchar(t, o, "replacement", SPIECE_UNDERLINE, path, &st->repl, err)) return -1;
        st->pat.lit = st->repl;
        return load_scheme(o, path, &st->prepend, err);
    }
    return loom_errf(err, "%s.type: unsupported pre-tokenizer \"%s\"", path, type);
}

static int load_template(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const cJSON *single = jget(o, "single"), *specials = jget(o, "special_tokens");
    if (!cJSON_IsArray(single)) return loom_errf(err, "%s.single: missing or not a list", path);
    if (t->n_tmpl == MAX_STEPS) return loom_errf(err, "%s: more than %d templates", path, MAX_STEPS);
    tmpl *tp = &t->tmpls[t->n_tmpl++];
    int i = 0;
    for (const cJSON *it = single->child; it; it = it->next, i++) {
        const char *seq = jstr(jget(it, "Sequence"), "id"), *name = jstr(jget(it, "SpecialToken"), "id");
        if (seq) {
            if (strcmp(seq, "A"))
                return loom_errf(err, "%s.single[%d]: sequence \"%s\" in a one-sequence template", path, i, seq);
            if (ARRAY_RESERVE(tp->items, tp->cap, tp->n + 1, "a post-processor template", err)) return -1;
            tp->items[tp->n++] = -1;
            continue;
        }
        const cJSON *ids = jget(jget(specials, name ? name : ""), "ids");
        if (!name || !cJSON_IsArray(ids))
            return loom_errf(err, "%s.single[%d]: not a Sequence or a SpecialToken listed in special_tokens", path, i);
        for (const cJSON *v = ids->child; v; v = v->next) {
            int32_t id = jid(v);
            if (id < 0) return loom_errf(err, "%s.special_tokens[\"%s\"].ids: bad id", path, name);
            if (ARRAY_RESERVE(tp->items, tp->cap, tp->n + 1, "a post-processor template", err)) return -1;
            tp->items[tp->n++] = id;
        }
    }
    return 0;
}

static int load_post(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    if (jnull(o)) return 0;
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "processors", path, load_post, err);
    if (!strcmp(type, "ByteLevel")) return 0; /* it only trims offsets */
    if (!strcmp(type, "TemplateProcessing")) return load_template(t, o, path, err);
    return loom_errf(err, "%s.type: unsupported post-processor \"%s\"", path, type);
}

/* Strip trims characters off the fused text; HF would trim each token when it comes before the
 * fusing step, and we only stream the former. */
static int load_strip(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const cJSON *start = jget(o, "start"), *stop = jget(o, "stop");
    if (!t->dec_fused || t->has_strip)
        return loom_errf(err, "%s: Strip is only supported once, after Fuse or ByteLevel", path);
    if (jid(start) < 0) return loom_errf(err, "%s.start: expected a count", path);
    if (jid(stop) != 0) return loom_errf(err, "%s.stop: only 0 is supported", path);
    t->has_strip = true;
    t->strip_start = (uint32_t)jid(start);
    return jchar(t, o, "content", NULL, path, &t->strip_content, err);
}

static int load_dec_step(tokenizer *t, const cJSON *o, const char *path, loom_err *err) {
    const char *type = type_of(o, path, err);
    if (!type) return -1;
    if (!strcmp(type, "Strip")) return load_strip(t, o, path, err);
    if (t->dec_fused) return loom_errf(err, "%s: only Strip may follow Fuse or ByteLevel", path);
    if (t->n_dec == TOK_DEC_MAX_STEPS) return loom_errf(err, "%s: more than %d decoders", path, TOK_DEC_MAX_STEPS);
    dec_step *st = &t->dec[t->n_dec];
    if (!strcmp(type, "Replace")) {
        const char *from = jstr(jget(o, "pattern"), "String"), *to = jstr(o, "content");
        if (!from || !*from) return loom_errf(err, "%s.pattern: only a non-empty {\"String\": ...} is supported", path);
        if (!to) return loom_errf(err, "%s.content: missing", path);
        st->kind = DEC_REPLACE;
        if (tok_intern(t, from, strlen(from), &st->from, err) || tok_intern(t, to, strlen(to), &st->to, err)) return -1;
    } else if (!strcmp(type, "Metaspace")) {
        prepend_scheme scheme;
        st->kind = DEC_METASPACE;
        if (jchar(t, o, "replacement", SPIECE_UNDERLINE, path, &st->from, err) || load_scheme(o, path, &scheme, err))
            return -1;
        st->strip_first = scheme != PREPEND_NEVER;
    } else if (!strcmp(type, "ByteFallback")) {
        if (t->dec_bf >= 0) return loom_errf(err, "%s: more than one ByteFallback", path);
        st->kind = DEC_BYTEFALLBACK;
        t->dec_bf = t->n_dec;
    } else if (!strcmp(type, "Fuse") || !strcmp(type, "ByteLevel")) {
        st->kind = type[0] == 'F' ? DEC_FUSE : DEC_BYTELEVEL;
        t->dec_fused = true;
    } else {
        return loom_errf(err, "%s.type: unsupported decoder \"%s\"", path, type);
    }
    t->n_dec++;
    return 0;
}

static int load_decoder(tokenizer *t, const cJSON *o, loom_err *err) {
    t->dec_bf = -1;
    if (jnull(o)) {
        t->dec_join_space = true;
        return 0;
    }
    const char *type = type_of(o, "decoder", err);
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return load_list(t, o, "decoders", "decoder", load_dec_step, err);
    return load_dec_step(t, o, "decoder", err);
}

/* ---------------------------------------------------------------- added tokens */

static int load_added(tokenizer *t, const cJSON *list, loom_err *err) {
    if (jnull(list)) return 0;
    if (!cJSON_IsArray(list)) return loom_errf(err, "added_tokens: not a list");
    if (!(t->added = mem_zalloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *t->added, "added_tokens", err)))
        return -1;
    int i = 0;
    for (const cJSON *o = list->child; o; o = o->next, i++) {
        const char *content = jstr(o, "content");
        int32_t id = jid(jget(o, "id"));
        if (!content) return loom_errf(err, "added_tokens[%d].content: missing", i);
        if (id < 0) return loom_errf(err, "added_tokens[%d].id: missing or not an id", i);
        if (!*content) continue; /* HF ignores empty tokens */
        size_t n = strlen(content);
        added_tok *a = &t->added[t->n_added++];
        /* HF keeps the vocab's id for a token the model already has. */
        int32_t vid = tok_vocab_find(t, content, n);
        a->id = vid >= 0 ? vid : id;
        a->special = jbool(o, "special", false);
        a->lstrip = jbool(o, "lstrip", false);
        a->rstrip = jbool(o, "rstrip", false);
        a->single_word = jbool(o, "single_word", false);
        a->normalized = jbool(o, "normalized", !a->special);
        if (tok_intern(t, content, n, &a->content, err)) return -1;
        if (a->single_word && !t->word_re && !(t->word_re = compile_re(WORD_PATTERN, "single_word", err))) return -1;
    }
    return 0;
}

static int finish_added(tokenizer *t, loom_err *err) {
    t->n_ids = t->model_n;
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].id >= t->n_ids) t->n_ids = t->added[i].id + 1;
    if (!(t->added_of = mem_array((size_t)t->n_ids, sizeof *t->added_of, "the added-token lookup", err))) return -1;
    for (int32_t i = 0; i < t->n_ids; i++) t->added_of[i] = -1;
    for (uint32_t i = 0; i < t->n_added; i++) t->added_of[t->added[i].id] = (int32_t)i; /* last wins */
    for (int k = 0; k < t->n_tmpl; k++)
        for (size_t i = 0; i < t->tmpls[k].n; i++)
            if (t->tmpls[k].items[i] >= t->n_ids)
                return loom_errf(err, "post_processor: template id %d is not in the vocab", t->tmpls[k].items[i]);
    return tok_added_index(t, err);
}

/* ---------------------------------------------------------------- entry points */

static void init_byte_map(tokenizer *t) {
    uint32_t extra = 0;
    for (int c = 0; c < 324; c++) t->char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        /* GPT-2 keeps printable Latin-1 bytes as themselves, moves the rest to 256 and up */
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t c = keep ? (uint32_t)b : 256 + extra++;
        t->byte_char_len[b] = (uint8_t)u8encode(c, t->byte_char[b]);
        t->char_byte[c] = (int16_t)b;
    }
}

static int load(tokenizer *t, const cJSON *root, loom_err *err) {
    if (!cJSON_IsObject(root)) return loom_errf(err, "not a JSON object");
    if (load_model(t, jget(root, "model"), err) || load_normalizer(t, jget(root, "normalizer"), "normalizer", err) ||
        load_added(t, jget(root, "added_tokens"), err) ||
        load_pretok(t, jget(root, "pre_tokenizer"), "pre_tokenizer", err) ||
        load_post(t, jget(root, "post_processor"), "post_processor", err) ||
        load_decoder(t, jget(root, "decoder"), err) || finish_added(t, err))
        return -1;
    init_byte_map(t);
    tok_decode_init_cap(t);
    return 0;
}

tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name, loom_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        loom_errf(err, "%s: invalid JSON near byte %zu", name, end && end >= json ? (size_t)(end - json) : (size_t)0);
        return NULL;
    }
    tokenizer *t = tokenizer_load_tree(root, name, err);
    cJSON_Delete(root);
    return t;
}

tokenizer *tokenizer_load_tree(const cJSON *root, const char *name, loom_err *err) {
    tokenizer *t = mem_zalloc(1, sizeof *t, "the tokenizer", err);
    if (!t || load(t, root, err)) {
        loom_err_prefix(err, "%s", name);
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

tokenizer *tokenizer_load_file(const char *path, loom_err *err) {
    size_t len;
    char *json = file_read_all(path, &len, err);
    if (!json) return NULL;
    tokenizer *t = tokenizer_load_json(json, len, path, err);
    free(json);
    return t;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_norm; i++) pcre2_code_free(t->norm[i].pat.re);
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].pat.re);
    for (int i = 0; i < t->n_tmpl; i++) free(t->tmpls[i].items);
    pcre2_code_free(t->word_re);
    free(t->raw_set.idx);
    free(t->norm_set.idx);
    free(t->added);
    free(t->added_of);
    free(t->model_str);
    free(t->vocab_slot);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->pair_new);
    free(t->arena.p);
    free(t);
}
