/* Chat template tests: every published template in tests/data/templates/<name>/ rendered on its
 * cases.json, byte for byte against transformers' rendering (tests/golden/make_template_golden.py),
 * and raising where transformers raises; the interpreter's corners in _unit/cases.json (inline
 * templates, expectations from the same oracle); constructs that must be refused at parse time
 * with their name; bad contexts; and chat_templates_load's choice of template. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "check_json.h"
#include "template/template.h"
#include "util/file.h"

#define TMPLDIR LOOM_SOURCE_DIR "/tests/data/templates/"

/* Prints where two renderings first differ, with some context around it. */
static void print_diff(const char *what, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "%s: first difference at byte %zu\n  expected: ...%.120s\n  got:      ...%.120s\n", what, i,
            want + from, got + from);
}

/* Renders one case and checks it; returns whether it passed. */
static bool run_case(const chat_template *t, const char *what, const cJSON *c) {
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(c, "context");
    const cJSON *expected = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(c, "error");
    loom_err err = {{0}};
    char *out = NULL;
    int rc = chat_template_render(t, ctx, false, &out, &err);
    bool ok;
    if (cJSON_IsString(expected)) {
        ok = rc == 0 && !strcmp(out, expected->valuestring);
        CHECK(rc == 0, "%s: %s", what, err.msg);
        if (rc == 0 && !ok) print_diff(what, expected->valuestring, out);
        CHECK(rc != 0 || ok, "%s: rendering differs from transformers'", what);
    } else {
        ok = rc != 0 && (!cJSON_IsString(error) || strstr(err.msg, error->valuestring));
        CHECK(rc != 0, "%s: rendered, but transformers raises \"%s\"", what,
              cJSON_IsString(error) ? error->valuestring : "");
        CHECK(rc == 0 || ok, "%s: error \"%s\" lacks \"%s\"", what, err.msg, error->valuestring);
    }
    free(out);
    return ok;
}

static void test_published(void) {
    DIR *d = opendir(TMPLDIR);
    CHECK(d, "cannot list %s", TMPLDIR);
    if (!d) return;
    int ndirs = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || e->d_name[0] == '_') continue;
        char path[1024], name[300];
        snprintf(name, sizeof name, "%s", e->d_name);
        snprintf(path, sizeof path, TMPLDIR "%s/template.jinja", name);
        loom_err err = {{0}};
        char *src = file_read_all(path, NULL, &err);
        CHECK(src, "%s", err.msg);
        chat_template *t = src ? chat_template_parse(src, name, &err) : NULL;
        CHECK(t, "%s", err.msg);
        snprintf(path, sizeof path, TMPLDIR "%s/cases.json", name);
        cJSON *cases = read_json(path);
        int n = 0, passed = 0;
        for (const cJSON *c = cases ? cases->child : NULL; c && t; c = c->next, n++) {
            char what[400];
            snprintf(what, sizeof what, "%s/%s", name, cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
            passed += run_case(t, what, c);
        }
        printf("%-14s %2d/%2d cases\n", name, passed, n);
        CHECK(n > 0, "%s: no cases", name);
        cJSON_Delete(cases);
        chat_template_free(t);
        free(src);
        ndirs++;
    }
    closedir(d);
    CHECK(ndirs >= 10, "only %d template directories", ndirs);
}

static void test_unit(void) {
    cJSON *cases = read_json(TMPLDIR "_unit/cases.json");
    int n = 0, passed = 0;
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next, n++) {
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        loom_err err = {{0}};
        chat_template *t =
            chat_template_parse(cJSON_GetObjectItemCaseSensitive(c, "template")->valuestring, name, &err);
        /* an error case may already fail to parse; the unit cases record jinja's messages, which
         * need not match loom's word for word, so only the failure itself is required */
        bool want_error = cJSON_HasObjectItem(c, "error");
        if (!t) {
            CHECK(want_error, "_unit/%s: %s", name, err.msg);
            passed += want_error;
            continue;
        }
        cJSON *copy = cJSON_Duplicate(c, true);
        if (want_error) cJSON_DeleteItemFromObjectCaseSensitive(copy, "error");
        if (want_error) cJSON_AddNullToObject(copy, "error");
        char what[300];
        snprintf(what, sizeof what, "_unit/%s", name);
        passed += run_case(t, what, copy);
        cJSON_Delete(copy);
        chat_template_free(t);
    }
    printf("%-14s %2d/%2d cases\n", "_unit", passed, n);
    cJSON_Delete(cases);
}

/* Refused when parsed, with the construct named in the message. */
static void test_unsupported(void) {
    static const char *const cases[][2] = {
        {"{% include 'x' %}", "tag 'include' is not supported"},
        {"{% import 'x' as y %}", "tag 'import' is not supported"},
        {"{% frobnicate %}", "unknown tag 'frobnicate'"},
        {"{{ x|frobnicate }}", "unknown filter 'frobnicate'"},
        {"{{ x|wordwrap }}", "filter 'wordwrap' is not supported"},
        {"{{ x is frobnicated }}", "unknown test 'frobnicated'"},
        {"{{ x|select('frobnicated')|list }}", "unknown test 'frobnicated'"},
        {"{{ x|map('frobnicate')|list }}", "unknown filter 'frobnicate'"},
        {"{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported"},
        {"{% call m() %}{% endcall %}", "tag 'call' is not supported"},
        {"{{ f(*args) }}", "*args"},
        {"{% if x %}", "'if' is not closed"},
        {"{{ x", "inside a tag"},
        {"{# open", "missing end of comment"},
        {"{% break %}", "'break' outside a for loop"},
        {"{{ 'a' }\n}", "unexpected '}'"},
        {"line1\n{{ (1 }}", "line 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loom_err err = {{0}};
        chat_template *t = chat_template_parse(cases[i][0], "bad", &err);
        CHECK(!t, "%s: parsed", cases[i][0]);
        CHECK(strstr(err.msg, cases[i][1]) && strstr(err.msg, "chat template bad"), "%s: \"%s\" lacks \"%s\"",
              cases[i][0], err.msg, cases[i][1]);
        chat_template_free(t);
    }
    /* found only when reached: an unsupported method, a case mapping beyond ASCII */
    static const char *const late[][3] = {
        {"{{ 'x'.center(9) }}", "{\"messages\": []}", "str.center() is not supported"},
        {"{{ s|upper }}", "{\"messages\": [], \"s\": \"\\u00e9\"}", "non-ASCII"},
        {"{{ '%s' % 1 }}", "{\"messages\": []}", "string formatting is not supported"},
        {"{{ 2 ** 64 }}", "{\"messages\": []}", "integer overflow"},
    };
    for (size_t i = 0; i < sizeof late / sizeof *late; i++) {
        loom_err err = {{0}};
        chat_template *t = chat_template_parse(late[i][0], "late", &err);
        CHECK(t, "%s: %s", late[i][0], err.msg);
        cJSON *ctx = cJSON_Parse(late[i][1]);
        char *out = NULL;
        CHECK(t && chat_template_render(t, ctx, false, &out, &err) != 0, "%s: rendered", late[i][0]);
        CHECK(strstr(err.msg, late[i][2]), "%s: \"%s\" lacks \"%s\"", late[i][0], err.msg, late[i][2]);
        free(out);
        cJSON_Delete(ctx);
        chat_template_free(t);
    }
}

/* Contexts a server could be sent: errors, never crashes. */
static void test_bad_context(void) {
    loom_err err = {{0}};
    chat_template *t = chat_template_parse("{% for m in messages %}{{ m.content }}{% endfor %}", "ctx", &err);
    CHECK(t, "%s", err.msg);
    static const char *const bad[][2] = {
        {"[]", "not a JSON object"},
        {"{}", "no messages"},
        {"{\"messages\": {\"role\": \"user\"}}", "messages is not a list"},
        {"{\"messages\": [\"hello\"]}", "message 0 is not an object"},
        {"{\"messages\": [{\"content\": \"\\udc80\"}]}", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *ctx = cJSON_Parse(bad[i][0]);
        char *out = NULL;
        if (!ctx) continue; /* cJSON itself refused it */
        CHECK(chat_template_render(t, ctx, false, &out, &err) != 0 && strstr(err.msg, bad[i][1]), "%s: \"%s\"",
              bad[i][0], err.msg);
        free(out);
        cJSON_Delete(ctx);
    }
    /* limits are errors: output size, loop steps, macro recursion */
    static const char *const heavy[][2] = {
        {"{% for i in range(1000000) %}{{ 'x' * 100 }}{% endfor %}", "output larger"},
        {"{% for i in range(1000000) %}{% for j in messages %}{% endfor %}{% endfor %}", "evaluation steps"},
        {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nested more than"},
        {"{{ 'x' * 9000000000 }}", "working memory"},
    };
    cJSON *ctx = cJSON_Parse("{\"messages\": []}"), *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    for (int i = 0; i < 1000; i++) cJSON_AddItemToArray(msgs, cJSON_CreateObject());
    for (size_t i = 0; i < sizeof heavy / sizeof *heavy; i++) {
        chat_template *h = chat_template_parse(heavy[i][0], "heavy", &err);
        char *out = NULL;
        CHECK(h && chat_template_render(h, ctx, false, &out, &err) != 0 && strstr(err.msg, heavy[i][1]), "%s: \"%s\"",
              heavy[i][0], err.msg);
        free(out);
        chat_template_free(h);
    }
    cJSON_Delete(ctx);
    chat_template_free(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char *render_simple(chat_template *t) {
    cJSON *ctx = cJSON_Parse("{\"messages\": []}");
    char *out = NULL;
    loom_err err = {{0}};
    if (t) CHECK(chat_template_render(t, ctx, false, &out, &err) == 0, "%s", err.msg);
    cJSON_Delete(ctx);
    return out;
}

/* The template transformers would pick, and the special tokens beside it. */
static void test_load(void) {
    char dir[] = "/tmp/loom_tmpl_XXXXXX", path[256];
    CHECK(mkdtemp(dir), "mkdtemp");
    loom_err err = {{0}};
    chat_templates t;
    CHECK(chat_templates_load(dir, NULL, NULL, NULL, &t, &err) == 0 && !t.plain && !t.tools, "no template: %s",
          err.msg);

    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path, "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
                     " \"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", "
                     "\"template\": \"T\"}]}");
    CHECK(chat_templates_load(dir, NULL, NULL, NULL, &t, &err) == 0, "%s", err.msg);
    char *out = render_simple(t.plain);
    CHECK(out && !strcmp(out, "D") && t.bos_token && !strcmp(t.bos_token, "<s>") && t.eos_token &&
              !strcmp(t.eos_token, "</s>"),
          "default: %s", out ? out : err.msg);
    free(out);
    out = render_simple(t.tools);
    CHECK(out && !strcmp(out, "T"), "tool_use: %s", out ? out : err.msg);
    free(out), chat_templates_free(&t);

    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    write_file(path, "J");
    CHECK(chat_templates_load(dir, NULL, NULL, NULL, &t, &err) == 0, "%s", err.msg);
    out = render_simple(t.tools);
    CHECK(out && !strcmp(out, "J") && t.tools == t.plain, "chat_template.jinja replaces the config's: %s",
          out ? out : err.msg);
    free(out), chat_templates_free(&t);

    snprintf(path, sizeof path, "%s/override.jinja", dir);
    write_file(path, "O{{ 1 + 1 }}");
    CHECK(chat_templates_load(dir, path, NULL, NULL, &t, &err) == 0, "%s", err.msg);
    out = render_simple(t.plain);
    CHECK(out && !strcmp(out, "O2"), "override: %s", out ? out : err.msg);
    free(out), chat_templates_free(&t);
    CHECK(chat_templates_load(NULL, path, NULL, NULL, &t, &err) == 0 && t.plain && !t.bos_token,
          "override without a folder: %s", err.msg);
    chat_templates_free(&t);

    const char *names[] = {"tokenizer_config.json", "chat_template.jinja", "override.jinja"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

int main(void) {
    /* strftime_now's clock, pinned as the oracle pinned it */
    setenv("SOURCE_DATE_EPOCH", "1736942400", 1);
    setenv("TZ", "UTC", 1);
    test_published();
    test_unit();
    test_unsupported();
    test_bad_context();
    test_load();
    return check_done();
}
