/* The parser: tokens to a syntax tree, a recursive descent over jinja2/parser.py's grammar
 * (same precedence, same tuple, slice, filter and test rules). Everything this subset does not
 * implement is refused here, by name, when it can be recognised without running the template:
 * tags, filters, tests, recursive loops, call blocks, *args. */
#include <string.h>

#include "template/tmpl_impl.h"

typedef struct parser {
    tctx *c;
    token *t;
    size_t i, n;
    int depth, loops; /* nesting of the current construct; for loops around it (break/continue) */
} parser;

static token *cur(parser *P) { return &P->t[P->i]; }
static token *peek(parser *P) { return &P->t[P->i + (P->i + 1 < P->n)]; }
static token *next(parser *P) {
    token *t = cur(P);
    if (P->i + 1 < P->n) P->i++;
    return t;
}
static bool is_op(parser *P, int op) { return cur(P)->kind == T_OP && cur(P)->op == op; }
static bool is_name(const token *t, const char *name) { return t->kind == T_NAME && !strcmp(t->p, name); }
static bool skip_op(parser *P, int op) { return is_op(P, op) ? (next(P), true) : false; }
static bool skip_name(parser *P, const char *name) { return is_name(cur(P), name) ? (next(P), true) : false; }

static const char *describe(const token *t) {
    static const char *const kinds[] = {"end of template", "template data", "'{{'",  "'}}'",    "'{%'", "'%}'", "name",
                                        "string",          "integer",       "float", "operator"};
    return t->kind == T_NAME ? t->p : kinds[t->kind];
}

_Noreturn static void fail_at(parser *P, const char *what) {
    tfail(P->c, cur(P)->line, "unexpected %s, expected %s", describe(cur(P)), what);
}

static void expect_op(parser *P, int op, const char *what) {
    if (!skip_op(P, op)) fail_at(P, what);
}

static token *expect_name(parser *P) {
    if (cur(P)->kind != T_NAME) fail_at(P, "a name");
    return next(P);
}

static void enter(parser *P) {
    if (++P->depth > TMPL_MAX_NESTING) tfail(P->c, cur(P)->line, "nested more than %d deep", TMPL_MAX_NESTING);
}

static node *mk(parser *P, int kind, int line) {
    node *n = talloc(P->c, sizeof *n);
    *n = (node){.kind = (uint8_t)kind, .line = line};
    return n;
}

static void push(parser *P, nodes *l, node *n) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        node **v = talloc(P->c, (size_t)cap * sizeof *v);
        if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void push_name(parser *P, node *n, const char *name) {
    const char **v = talloc(P->c, (size_t)(n->nnames + 1) * sizeof *v);
    if (n->nnames) memcpy(v, n->names, (size_t)n->nnames * sizeof *v);
    v[n->nnames++] = name;
    n->names = v;
}

/* ---------------------------------------------------------------- expressions */

static node *parse_expression(parser *P, bool with_condexpr);
static node *parse_unary(parser *P, bool with_filter);
static node *parse_primary(parser *P);

static bool is_tuple_end(parser *P, const char *extra) {
    token *t = cur(P);
    if (t->kind == T_VAR_END || t->kind == T_BLOCK_END || (t->kind == T_OP && t->op == OP_RPAREN)) return true;
    return extra && is_name(t, extra);
}

/* A comma-separated list becomes a tuple; one item without a comma is just that item.
 * simplified: names only (assignment targets). */
static node *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra, bool parens) {
    int line = cur(P)->line;
    node *tup = mk(P, E_TUPLE, line);
    bool is_tuple = false;
    for (;;) {
        if (tup->args.n) expect_op(P, OP_COMMA, "','");
        if (is_tuple_end(P, extra)) break;
        push(P, &tup->args, simplified ? parse_primary(P) : parse_expression(P, with_condexpr));
        if (!is_op(P, OP_COMMA)) break;
        is_tuple = true;
    }
    if (!is_tuple) {
        if (tup->args.n) return tup->args.v[0];
        if (!parens) fail_at(P, "an expression");
    }
    return tup;
}

static void parse_call_args(parser *P, node *call) {
    expect_op(P, OP_LPAREN, "'('");
    bool comma = false;
    while (!is_op(P, OP_RPAREN)) {
        if (comma) {
            expect_op(P, OP_COMMA, "','");
            if (is_op(P, OP_RPAREN)) break;
        }
        if (is_op(P, OP_MUL) || is_op(P, OP_POW))
            tfail(P->c, cur(P)->line, "*args and **kwargs in calls are not supported");
        if (cur(P)->kind == T_NAME && peek(P)->kind == T_OP && peek(P)->op == OP_ASSIGN) {
            push_name(P, call, next(P)->p);
            next(P);
            push(P, &call->kw, parse_expression(P, true));
        } else {
            if (call->kw.n) tfail(P->c, cur(P)->line, "a positional argument follows keyword arguments");
            push(P, &call->args, parse_expression(P, true));
        }
        comma = true;
    }
    next(P);
}

static node *parse_filter(parser *P, node *operand, bool start_inline) {
    while (is_op(P, OP_PIPE) || start_inline) {
        if (!start_inline) next(P);
        start_inline = false;
        token *name = expect_name(P);
        int fn = filter_lookup(name->p);
        if (fn == -1 || is_op(P, OP_DOT)) tfail(P->c, name->line, "unknown filter '%s'", name->p);
        if (fn == -2) tfail(P->c, name->line, "filter '%s' is not supported", name->p);
        node *f = mk(P, E_FILTER, name->line);
        f->fn = fn;
        f->s = name->p;
        f->a = operand;
        if (is_op(P, OP_LPAREN)) parse_call_args(P, f);
        filter_check_args(P->c, f);
        operand = f;
    }
    return operand;
}

static node *parse_postfix(parser *P, node *n);

static node *parse_test(parser *P, node *operand) {
    int line = next(P)->line; /* is */
    bool negated = skip_name(P, "not");
    token *name = expect_name(P);
    int fn = test_lookup(name->p);
    if (fn == -1 || is_op(P, OP_DOT)) tfail(P->c, name->line, "unknown test '%s'", name->p);
    if (fn == -2) tfail(P->c, name->line, "test '%s' is not supported", name->p);
    node *t = mk(P, E_TEST, line);
    t->fn = fn;
    t->s = name->p;
    t->a = operand;
    token *k = cur(P);
    if (is_op(P, OP_LPAREN)) {
        parse_call_args(P, t);
    } else if ((k->kind == T_NAME || k->kind == T_STRING || k->kind == T_INT || k->kind == T_FLOAT ||
                (k->kind == T_OP && (k->op == OP_LBRACKET || k->op == OP_LBRACE))) &&
               !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and")) {
        if (is_name(k, "is")) tfail(P->c, k->line, "you cannot chain multiple tests with is");
        push(P, &t->args, parse_postfix(P, parse_primary(P)));
    }
    if (!negated) return t;
    node *n = mk(P, E_NOT, line);
    n->a = t;
    return n;
}

static node *parse_filter_expr(parser *P, node *n) {
    for (;;) {
        if (is_op(P, OP_PIPE)) {
            n = parse_filter(P, n, false);
        } else if (is_name(cur(P), "is")) {
            n = parse_test(P, n);
        } else if (is_op(P, OP_LPAREN)) {
            node *call = mk(P, E_CALL, cur(P)->line);
            call->a = n;
            parse_call_args(P, call);
            n = call;
        } else {
            return n;
        }
    }
}

/* expr[...] slice part: a[:b:c] forms, or a plain subscript. */
static node *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    node *parts[3] = {NULL, NULL, NULL};
    if (!skip_op(P, OP_COLON)) {
        node *e = parse_expression(P, true);
        if (!skip_op(P, OP_COLON)) return e;
        parts[0] = e;
    }
    if (!is_op(P, OP_COLON) && !is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA)) parts[1] = parse_expression(P, true);
    if (skip_op(P, OP_COLON) && !is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA)) parts[2] = parse_expression(P, true);
    node *s = mk(P, E_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static node *parse_postfix(parser *P, node *n) {
    for (;;) {
        int line = cur(P)->line;
        if (skip_op(P, OP_DOT)) {
            token *t = next(P);
            if (t->kind == T_NAME) {
                node *g = mk(P, E_GETATTR, line);
                g->a = n;
                g->s = t->p;
                g->n = t->n;
                n = g;
                continue;
            }
            if (t->kind != T_INT) tfail(P->c, t->line, "expected name or number after '.'");
            node *g = mk(P, E_GETITEM, line), *k = mk(P, E_CONST, line);
            k->k = t->k;
            g->a = n;
            g->b = k;
            n = g;
        } else if (skip_op(P, OP_LBRACKET)) {
            node *tup = mk(P, E_TUPLE, line);
            while (!is_op(P, OP_RBRACKET)) {
                if (tup->args.n) expect_op(P, OP_COMMA, "','");
                push(P, &tup->args, parse_subscribed(P));
            }
            next(P);
            node *g = mk(P, E_GETITEM, line);
            g->a = n;
            g->b = tup->args.n == 1 ? tup->args.v[0] : tup;
            n = g;
        } else if (is_op(P, OP_LPAREN)) {
            node *call = mk(P, E_CALL, line);
            call->a = n;
            parse_call_args(P, call);
            n = call;
        } else {
            return n;
        }
    }
}

static node *parse_primary(parser *P) {
    token *t = cur(P);
    node *n;
    if (t->kind == T_NAME) {
        next(P);
        n = mk(P, E_CONST, t->line);
        if (!strcmp(t->p, "true") || !strcmp(t->p, "True")) {
            n->k = v_bool(true);
        } else if (!strcmp(t->p, "false") || !strcmp(t->p, "False")) {
            n->k = v_bool(false);
        } else if (!strcmp(t->p, "none") || !strcmp(t->p, "None")) {
            n->k = V_NONE_VALUE;
        } else {
            n->kind = E_NAME;
            n->s = t->p;
        }
    } else if (t->kind == T_STRING) {
        n = mk(P, E_CONST, t->line);
        tbuf b = {0};
        while (cur(P)->kind == T_STRING) { /* adjacent literals concatenate */
            value k = next(P)->k;
            tb_put(P->c, &b, k.s.p, k.s.n);
        }
        n->k = v_str(b.p, b.n);
    } else if (t->kind == T_INT || t->kind == T_FLOAT) {
        next(P);
        n = mk(P, E_CONST, t->line);
        n->k = t->k;
    } else if (skip_op(P, OP_LPAREN)) {
        n = parse_tuple(P, false, true, NULL, true);
        expect_op(P, OP_RPAREN, "')'");
    } else if (skip_op(P, OP_LBRACKET)) {
        n = mk(P, E_LIST, t->line);
        while (!is_op(P, OP_RBRACKET)) {
            if (n->args.n) expect_op(P, OP_COMMA, "','");
            if (is_op(P, OP_RBRACKET)) break;
            push(P, &n->args, parse_expression(P, true));
        }
        next(P);
    } else if (skip_op(P, OP_LBRACE)) {
        n = mk(P, E_DICT, t->line);
        while (!is_op(P, OP_RBRACE)) {
            if (n->args.n) expect_op(P, OP_COMMA, "','");
            if (is_op(P, OP_RBRACE)) break;
            push(P, &n->args, parse_expression(P, true));
            expect_op(P, OP_COLON, "':'");
            push(P, &n->args, parse_expression(P, true));
        }
        next(P);
    } else {
        fail_at(P, "an expression");
    }
    return n;
}

static node *parse_unary(parser *P, bool with_filter) {
    enter(P);
    int line = cur(P)->line;
    node *n;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        n = mk(P, next(P)->op == OP_SUB ? E_NEG : E_POS, line);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static node *binary(parser *P, int kind, int op, int line, node *a, node *b) {
    node *n = mk(P, kind, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static node *parse_pow(parser *P) {
    node *n = parse_unary(P, true);
    while (is_op(P, OP_POW)) {
        int line = next(P)->line;
        n = binary(P, E_BIN, OP_POW, line, n, parse_unary(P, true));
    }
    return n;
}

static node *parse_math2(parser *P) {
    node *n = parse_pow(P);
    while (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD)) {
        token *t = next(P);
        n = binary(P, E_BIN, t->op, t->line, n, parse_pow(P));
    }
    return n;
}

static node *parse_concat(parser *P) {
    node *n = parse_math2(P);
    if (!is_op(P, OP_TILDE)) return n;
    node *cat = mk(P, E_CONCAT, cur(P)->line);
    push(P, &cat->args, n);
    while (skip_op(P, OP_TILDE)) push(P, &cat->args, parse_math2(P));
    return cat;
}

static node *parse_math1(parser *P) {
    node *n = parse_concat(P);
    while (is_op(P, OP_ADD) || is_op(P, OP_SUB)) {
        token *t = next(P);
        n = binary(P, E_BIN, t->op, t->line, n, parse_concat(P));
    }
    return n;
}

static node *parse_compare(parser *P) {
    int line = cur(P)->line;
    node *n = parse_math1(P), *cmp = NULL;
    for (;;) {
        int op;
        token *t = cur(P);
        if (t->kind == T_OP && t->op >= OP_EQ && t->op <= OP_LTEQ) {
            op = t->op;
            next(P);
        } else if (skip_name(P, "in")) {
            op = OP_IN;
        } else if (is_name(t, "not") && is_name(peek(P), "in")) {
            next(P);
            next(P);
            op = OP_NOTIN;
        } else {
            break;
        }
        if (!cmp) {
            cmp = mk(P, E_COMPARE, line);
            cmp->a = n;
        }
        push(P, &cmp->args, parse_math1(P));
        uint8_t *ops = talloc(P->c, (size_t)cmp->args.n);
        if (cmp->args.n > 1) memcpy(ops, cmp->ops, (size_t)cmp->args.n - 1);
        ops[cmp->args.n - 1] = (uint8_t)op;
        cmp->ops = ops;
    }
    return cmp ? cmp : n;
}

static node *parse_not(parser *P) {
    if (!is_name(cur(P), "not")) return parse_compare(P);
    enter(P);
    node *n = mk(P, E_NOT, next(P)->line);
    n->a = parse_not(P);
    P->depth--;
    return n;
}

static node *parse_and(parser *P) {
    node *n = parse_not(P);
    while (is_name(cur(P), "and")) {
        int line = next(P)->line;
        n = binary(P, E_AND, 0, line, n, parse_not(P));
    }
    return n;
}

static node *parse_or(parser *P) {
    node *n = parse_and(P);
    while (is_name(cur(P), "or")) {
        int line = next(P)->line;
        n = binary(P, E_OR, 0, line, n, parse_and(P));
    }
    return n;
}

static node *parse_condexpr(parser *P) {
    node *n = parse_or(P);
    while (is_name(cur(P), "if")) {
        node *c = mk(P, E_COND, next(P)->line);
        c->b = n;
        c->a = parse_or(P);
        if (skip_name(P, "else")) c->c = parse_condexpr(P);
        n = c;
    }
    return n;
}

static node *parse_expression(parser *P, bool with_condexpr) { return with_condexpr ? parse_condexpr(P) : parse_or(P); }

/* ---------------------------------------------------------------- statements */

static nodes subparse(parser *P, const char *const *ends);

/* After the tag's own tokens: %}, then the body up to one of ends (left current). */
static nodes parse_body(parser *P, const char *const *ends, const char *tag, bool drop_end) {
    skip_op(P, OP_COLON);
    if (cur(P)->kind != T_BLOCK_END) fail_at(P, "'%}'");
    next(P);
    nodes body = subparse(P, ends);
    if (cur(P)->kind == T_EOF) tfail(P->c, cur(P)->line, "unexpected end of template: '%s' is not closed", tag);
    if (drop_end) next(P);
    return body;
}

/* An assignment target: a name, names separated by commas (optionally parenthesised), or with
 * ns: namespace.attribute. */
static void parse_target(parser *P, node *s, const char *extra, bool ns) {
    int line = cur(P)->line;
    bool parens = skip_op(P, OP_LPAREN);
    token *first = expect_name(P);
    if (ns && !parens && is_op(P, OP_DOT)) {
        next(P);
        s->s = first->p;
        s->attr = expect_name(P)->p;
        return;
    }
    push_name(P, s, first->p);
    bool tuple = parens;
    while (skip_op(P, OP_COMMA)) {
        tuple = true;
        if ((parens && is_op(P, OP_RPAREN)) || is_tuple_end(P, extra) || is_op(P, OP_ASSIGN)) break;
        if (is_op(P, OP_LPAREN)) tfail(P->c, line, "nested tuple assignment targets are not supported");
        push_name(P, s, expect_name(P)->p);
    }
    if (parens) expect_op(P, OP_RPAREN, "')'");
    s->op = tuple; /* unpack even one name: "for (x,) in ..." */
    for (int i = 0; i < s->nnames; i++) {
        const char *n = s->names[i];
        if (!strcmp(n, "true") || !strcmp(n, "false") || !strcmp(n, "none") || !strcmp(n, "True") ||
            !strcmp(n, "False") || !strcmp(n, "None"))
            tfail(P->c, line, "can't assign to '%s'", n);
    }
}

static node *parse_for(parser *P, int line) {
    node *s = mk(P, S_FOR, line);
    parse_target(P, s, "in", false);
    if (!skip_name(P, "in")) fail_at(P, "'in'");
    s->a = parse_tuple(P, false, false, "recursive", false);
    if (skip_name(P, "if")) s->b = parse_expression(P, true);
    if (is_name(cur(P), "recursive")) tfail(P->c, line, "recursive for loops are not supported");
    static const char *const ends[] = {"endfor", "else", NULL}, *const end[] = {"endfor", NULL};
    P->loops++;
    s->body = parse_body(P, ends, "for", false);
    P->loops--;
    if (is_name(next(P), "else")) s->orelse = parse_body(P, end, "for", true);
    return s;
}

static node *parse_if(parser *P, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL}, *const end[] = {"endif", NULL};
    node *s = mk(P, S_IF, line);
    s->a = parse_tuple(P, false, false, NULL, false);
    s->body = parse_body(P, ends, "if", false);
    token *t = next(P);
    if (is_name(t, "elif")) {
        push(P, &s->orelse, parse_if(P, t->line));
        return s; /* the nested if consumed the endif */
    }
    if (is_name(t, "else")) s->orelse = parse_body(P, end, "if", true);
    return s;
}

static node *parse_set(parser *P, int line) {
    node *s = mk(P, S_SET, line);
    parse_target(P, s, NULL, true);
    if (skip_op(P, OP_ASSIGN)) {
        s->a = parse_tuple(P, false, true, NULL, false);
        return s;
    }
    static const char *const end[] = {"endset", NULL};
    s->kind = S_SET_BLOCK;
    s->a = parse_filter(P, NULL, false);
    s->body = parse_body(P, end, "set", true);
    return s;
}

static node *parse_macro(parser *P, int line) {
    node *s = mk(P, S_MACRO, line);
    s->s = expect_name(P)->p;
    expect_op(P, OP_LPAREN, "'('");
    while (!is_op(P, OP_RPAREN)) {
        if (s->nnames) expect_op(P, OP_COMMA, "','");
        push_name(P, s, expect_name(P)->p);
        if (skip_op(P, OP_ASSIGN)) push(P, &s->args, parse_expression(P, true));
        else if (s->args.n) tfail(P->c, line, "non-default argument follows default argument");
    }
    next(P);
    static const char *const end[] = {"endmacro", NULL};
    int loops = P->loops;
    P->loops = 0;
    s->body = parse_body(P, end, "macro", true);
    P->loops = loops;
    return s;
}

static node *parse_statement(parser *P) {
    token *t = cur(P);
    if (t->kind != T_NAME) fail_at(P, "a tag name");
    enter(P);
    next(P);
    const char *tag = t->p;
    node *s;
    if (!strcmp(tag, "for")) {
        s = parse_for(P, t->line);
    } else if (!strcmp(tag, "if")) {
        s = parse_if(P, t->line);
    } else if (!strcmp(tag, "set")) {
        s = parse_set(P, t->line);
    } else if (!strcmp(tag, "macro")) {
        s = parse_macro(P, t->line);
    } else if (!strcmp(tag, "filter")) {
        static const char *const end[] = {"endfilter", NULL};
        s = mk(P, S_FILTER_BLOCK, t->line);
        s->a = parse_filter(P, NULL, true);
        s->body = parse_body(P, end, "filter", true);
    } else if (!strcmp(tag, "generation")) {
        /* transformers' AssistantTracker: the body renders as it is (its span is only recorded
         * for return_assistant_tokens_mask), inside a call block's scope */
        static const char *const end[] = {"endgeneration", NULL};
        s = mk(P, S_SCOPE, t->line);
        s->body = parse_body(P, end, "generation", true);
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!P->loops) tfail(P->c, t->line, "'%s' outside a for loop", tag);
        s = mk(P, tag[0] == 'b' ? S_BREAK : S_CONTINUE, t->line);
    } else {
        static const char *const known[] = {"include",    "import", "from", "extends", "block", "with",
                                            "autoescape", "call",   "do",   "trans",   NULL};
        for (int i = 0; known[i]; i++)
            if (!strcmp(tag, known[i])) tfail(P->c, t->line, "tag '%s' is not supported", tag);
        tfail(P->c, t->line, "unknown tag '%s'", tag);
    }
    if (cur(P)->kind != T_BLOCK_END) fail_at(P, "'%}'");
    P->depth--;
    return s;
}

static nodes subparse(parser *P, const char *const *ends) {
    nodes body = {0};
    for (;;) {
        token *t = cur(P);
        if (t->kind == T_EOF) return body;
        if (t->kind == T_DATA) {
            node *n = mk(P, S_TEXT, t->line);
            n->s = t->p;
            n->n = t->n;
            push(P, &body, n);
            next(P);
        } else if (t->kind == T_VAR_BEGIN) {
            next(P);
            node *n = mk(P, S_OUTPUT, t->line);
            n->a = parse_tuple(P, false, true, NULL, false);
            if (cur(P)->kind != T_VAR_END) fail_at(P, "'}}'");
            next(P);
            push(P, &body, n);
        } else if (t->kind == T_BLOCK_BEGIN) {
            next(P);
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(cur(P), ends[i])) return body;
            push(P, &body, parse_statement(P));
            next(P); /* %} */
        } else {
            fail_at(P, "template data or a tag");
        }
    }
}

node *parse(tctx *c, token *toks, size_t ntok) {
    parser P = {.c = c, .t = toks, .n = ntok};
    node *root = mk(&P, S_SCOPE, 1);
    root->body = subparse(&P, NULL);
    return root;
}
