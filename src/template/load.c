/* Finding a model's chat template as transformers' tokenizer loading does (tokenization_utils_base:
 * chat_template.jinja and additional_chat_templates/ replace tokenizer_config.json's entry; of
 * several named templates get_chat_template picks "tool_use" for a call with tools, else
 * "default"), and reading the bos/eos special tokens from tokenizer_config.json. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "template/template.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/file.h"

typedef struct named_template {
    char *name, *source;
} named_template;

typedef struct found {
    named_template *v;
    int n;
    size_t cap;
} found;

/* Adds a template, taking source (NULL: its reading failed, err says why). 0 or -1. */
static int add(found *f, const char *name, char *source, loom_err *err) {
    if (!source) return -1;
    char *copy = mem_strdup(name, "a chat template's name", err);
    if (!copy || ARRAY_RESERVE(f->v, f->cap, (size_t)f->n + 1, "the chat templates", err)) {
        free(copy);
        free(source);
        return -1;
    }
    f->v[f->n++] = (named_template){copy, source};
    return 0;
}

static void found_free(found *f) {
    for (int i = 0; i < f->n; i++) {
        free(f->v[i].name);
        free(f->v[i].source);
    }
    free(f->v);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A special token as tokenizer_config.json writes it: a string or {"content": "..."}, into *out
 * (NULL when there is none); -1 when out of memory. */
static int token_string(const cJSON *v, char **out, loom_err *err) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    *out = cJSON_IsString(v) ? mem_strdup(v->valuestring, "a special token", err) : NULL;
    return cJSON_IsString(v) && !*out ? -1 : 0;
}

/* chat_template.jinja and additional_chat_templates/NAME.jinja; -1 on a read error. */
static int read_jinja_files(const char *dir, found *f, loom_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (is_file(path)) {
        if (add(f, "default", file_read_all(path, NULL, err), err)) return -1;
    }
    snprintf(path, sizeof path, "%s/additional_chat_templates", dir);
    DIR *d = opendir(path);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n <= 6 || strcmp(e->d_name + n - 6, ".jinja")) continue;
        char file[4096 + 256];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        if (!is_file(file)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - 6), e->d_name);
        rc = add(f, name, file_read_all(file, NULL, err), err);
    }
    closedir(d);
    return rc;
}

/* tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}. */
static int read_config_templates(const cJSON *cfg, const char *path, found *f, loom_err *err) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (!ct || cJSON_IsNull(ct)) return 0;
    if (cJSON_IsString(ct)) return add(f, "default", mem_strdup(ct->valuestring, "a chat template", err), err);
    if (!cJSON_IsArray(ct)) return loom_errf(err, "%s: chat_template is neither a string nor a list", path);
    for (const cJSON *e = ct->child; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(name) || !cJSON_IsString(tmpl))
            return loom_errf(err, "%s: a chat_template entry lacks a string name or template", path);
        if (add(f, name->valuestring, mem_strdup(tmpl->valuestring, "a chat template", err), err)) return -1;
    }
    return 0;
}

/* The template of the name get_chat_template picks: "tool_use" for a call with tools where
 * there is one, else "default" (a single unnamed template is "default"). */
static const named_template *pick(const found *f, bool has_tools, const char *where, loom_err *err) {
    if (f->n == 1 && !strcmp(f->v[0].name, "default")) return &f->v[0];
    const named_template *dflt = NULL;
    for (int i = 0; i < f->n; i++) {
        if (has_tools && !strcmp(f->v[i].name, "tool_use")) return &f->v[i];
        if (!strcmp(f->v[i].name, "default")) dflt = &f->v[i];
    }
    if (dflt) return dflt;
    char names[256] = "";
    for (int i = 0; i < f->n; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", f->v[i].name);
    loom_errf(err, "%s: several chat templates and none is \"default\" (%s)", where, names);
    return NULL;
}

/* A chosen template parsed, named in errors by where it came from ("DIR:tool_use"). */
static chat_template *parse_chosen(const named_template *chosen, const char *where, loom_err *err) {
    char name[4200];
    bool named = strcmp(chosen->name, "default") != 0;
    snprintf(name, sizeof name, "%s%s%s", where, named ? ":" : "", named ? chosen->name : "");
    return chat_template_parse(chosen->source, name, err);
}

int chat_templates_load(const char *model_dir, const char *override_path, const char *model_template,
                        const char *model_tools, chat_templates *out, loom_err *err) {
    *out = (chat_templates){0};
    char cfg_path[4096];
    cJSON *cfg = NULL;
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", model_dir ? model_dir : "");
    if (model_dir && is_file(cfg_path)) {
        char *text = file_read_all(cfg_path, NULL, err);
        if (!text) return -1;
        cfg = cJSON_Parse(text);
        free(text);
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return loom_errf(err, "%s: not a JSON object", cfg_path);
        }
        if (token_string(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token"), &out->bos_token, err) ||
            token_string(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token"), &out->eos_token, err)) {
            cJSON_Delete(cfg);
            chat_templates_free(out);
            return -1;
        }
    }
    found f = {0};
    const char *where = override_path ? override_path : model_dir;
    int rc = 0;
    if (override_path) {
        rc = add(&f, "default", file_read_all(override_path, NULL, err), err);
    } else if (model_template) {
        rc = add(&f, "default", mem_strdup(model_template, "the chat template", err), err);
        if (rc == 0 && model_tools) rc = add(&f, "tool_use", mem_strdup(model_tools, "the chat template", err), err);
    } else if (model_dir) {
        rc = read_jinja_files(model_dir, &f, err);
        if (rc == 0 && f.n == 0 && cfg) rc = read_config_templates(cfg, cfg_path, &f, err);
    }
    cJSON_Delete(cfg);
    if (rc == 0 && f.n) {
        const named_template *plain = pick(&f, false, where, err), *tools = plain ? pick(&f, true, where, err) : NULL;
        if (!plain || !(out->plain = parse_chosen(plain, where, err))) rc = -1;
        else if (!(out->tools = tools == plain ? out->plain : parse_chosen(tools, where, err))) rc = -1;
        else if (!(out->tools_source = mem_strdup(tools->source, "a chat template", err))) rc = -1;
        if (rc == 0) {
            out->plain_caps = chat_template_probe(out->plain);
            out->tools_caps = out->tools == out->plain ? out->plain_caps : chat_template_probe(out->tools);
        }
    }
    found_free(&f);
    if (rc) chat_templates_free(out);
    return rc;
}

void chat_templates_free(chat_templates *t) {
    if (t->tools != t->plain) chat_template_free(t->tools);
    chat_template_free(t->plain);
    free(t->tools_source);
    free(t->bos_token);
    free(t->eos_token);
    *t = (chat_templates){0};
}
