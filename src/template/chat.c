/* Chat templates: the entry points of template.h, and the context preparation that transformers'
 * apply_chat_template does before rendering.
 *
 * The Jinja2 interpreter behind them is written here, in C, because no maintained C
 * implementation of Jinja2 exists (Debian packages none), and a chat template is untrusted code
 * from a model repository: the subset real templates use, with jinja2's exact output semantics,
 * is small enough to own, and everything outside it is refused by name instead of being guessed. */
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_impl.h"
#include "util/alloc.h"
#include "util/err.h"

struct chat_template {
    tctx c; /* owns every token and node */
    node *tree;
};

chat_template *chat_template_parse(const char *source, const char *name, loom_err *err) {
    chat_template *volatile t = mem_zalloc(1, sizeof *t, "a chat template", err); /* volatile: read after longjmp */
    if (!t) {
        loom_err_prefix(err, "chat template %s", name);
        return NULL;
    }
    jmp_buf jb;
    t->c = (tctx){.err = err, .jb = &jb};
    if (setjmp(jb)) {
        tfree_all(&t->c);
        free(t);
        return NULL;
    }
    t->c.name = tstrndup(&t->c, name, strlen(name));
    size_t ntok;
    token *toks = lex(&t->c, source, &ntok);
    t->tree = parse(&t->c, toks, ntok);
    t->c.err = NULL;
    t->c.jb = NULL;
    return t;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    tfree_all(&t->c);
    free(t);
}

/* transformers' _normalize_chat_messages and _alias_reasoning_fields: keys whose value is null
 * are dropped (unless keep_nulls), and reasoning under any of its names is passed as "thinking" (first) and
 * "reasoning_content". */
static value prepare_message(render *r, value m, bool keep_nulls) {
    static const char *const reasoning_names[] = {"reasoning_content", "thinking", "reasoning"};
    value out = v_dict(&r->c);
    for (size_t i = 0; i < m.d->n; i++)
        if (keep_nulls || m.d->v[i].kind != V_NONE) dict_set(&r->c, out.d, m.d->k[i], m.d->v[i]);
    value *reasoning = NULL;
    for (int k = 0; k < 3 && !reasoning; k++)
        reasoning = dict_getn(out.d, reasoning_names[k], strlen(reasoning_names[k]));
    if (!reasoning) return out;
    value aliased = v_dict(&r->c);
    dict_set(&r->c, aliased.d, v_cstr("thinking"), *reasoning);
    for (size_t i = 0; i < out.d->n; i++) dict_set(&r->c, aliased.d, out.d->k[i], out.d->v[i]);
    dict_set(&r->c, aliased.d, v_cstr("reasoning_content"), *reasoning);
    return aliased;
}

/* The root scope: jinja's globals, then the context's members over them, messages prepared. */
static void prepare_context(render *r, scope *root, const cJSON *context, bool keep_nulls) {
    if (!cJSON_IsObject(context)) tfail(&r->c, 0, "context: not a JSON object");
    add_globals(r, root);
    scope_set(r, root, "tools", V_NONE_VALUE);
    scope_set(r, root, "documents", V_NONE_VALUE);
    scope_set(r, root, "add_generation_prompt", v_bool(false));
    bool have_messages = false;
    for (const cJSON *e = context->child; e; e = e->next) {
        value v = json_to_value(&r->c, e);
        if (!strcmp(e->string, "messages")) {
            if (v.kind != V_LIST) tfail(&r->c, 0, "context: messages is not a list");
            for (size_t i = 0; i < v.l->n; i++) {
                if (v.l->v[i].kind != V_DICT) tfail(&r->c, 0, "context: message %zu is not an object", i);
                v.l->v[i] = prepare_message(r, v.l->v[i], keep_nulls);
            }
            have_messages = true;
        }
        scope_set(r, root, tstrndup(&r->c, e->string, strlen(e->string)), v);
    }
    if (!have_messages) tfail(&r->c, 0, "context: no messages");
}

int chat_template_render(const chat_template *t, const cJSON *context, bool keep_nulls, char **out, loom_err *err) {
    *out = NULL;
    jmp_buf jb;
    render r = {.c = {.name = t->c.name, .err = err, .jb = &jb}};
    if (setjmp(jb)) {
        tfree_all(&r.c);
        return -1;
    }
    r.root = scope_new(&r, NULL);
    prepare_context(&r, r.root, context, keep_nulls);
    tbuf b = {0};
    tb_put(&r.c, &b, "", 0);
    render_template(&r, t->tree, &b);
    loom_err why;
    if (!(*out = mem_alloc(b.n + 1, "the rendered chat", &why))) tfail(&r.c, 0, "%s", why.msg);
    memcpy(*out, b.p, b.n + 1);
    tfree_all(&r.c);
    return 0;
}
