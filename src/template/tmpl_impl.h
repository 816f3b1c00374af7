/* What the chat template files share: the arena every parse and render allocates from, the value
 * model (Python's objects as Jinja2 sees them), tokens, the syntax tree and the renderer's state.
 *
 *   arena.c    memory, error unwinding and the work limits
 *   value.c    values: constructors, Python truthiness, equality, ordering, str() and repr()
 *   json.c     cJSON -> values (the context), and values -> JSON text (the tojson filter)
 *   lex.c      source -> tokens, with Jinja2's whitespace control, trim_blocks and lstrip_blocks
 *   parse.c    tokens -> syntax tree; unknown tags, filters and tests are refused here
 *   eval.c     the renderer: scopes, statements, expressions, attribute and item access, calls
 *   filters.c  Jinja2's filters and tests
 *   methods.c  str/dict/list methods reachable from templates, and the global functions
 *   chat.c     the public entry points (template.h) and transformers' context preparation
 *   load.c     finding a model's template and special tokens on disk
 *
 * Errors unwind with longjmp to the entry point that set up the context: all memory of a parse
 * or render lives in its arena, so unwinding leaks nothing and no function checks return codes. */
#ifndef LOOM_TEMPLATE_TMPL_IMPL_H
#define LOOM_TEMPLATE_TMPL_IMPL_H
#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "template/template.h"

/* ---------------------------------------------------------------- arena and errors (arena.c) */

typedef struct chunk chunk;
typedef struct tctx {
    chunk *chunks;
    size_t used, left; /* bytes allocated in all chunks; free bytes in the newest */
    char *next;
    const char *name; /* the template's, for messages */
    loom_err *err;
    jmp_buf *jb;
    long steps;
} tctx;

void *talloc(tctx *c, size_t n);
void tfree_all(tctx *c);
/* Formats "chat template NAME: line N: ..." into the error and unwinds. */
_Noreturn void tfail(tctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Counts one unit of work; past TMPL_MAX_STEPS the render fails. */
void tstep(tctx *c, int line);

/* A growable byte string in the arena (it moves as it grows: the old copy stays behind). */
typedef struct tbuf {
    char *p;
    size_t n, cap;
} tbuf;
void tb_put(tctx *c, tbuf *b, const char *s, size_t n);
void tb_putc(tctx *c, tbuf *b, char ch);
void tb_printf(tctx *c, tbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tb_putcp(tctx *c, tbuf *b, uint32_t cp); /* one code point as UTF-8 */
char *tstrndup(tctx *c, const char *s, size_t n);

/* UTF-8 over well-formed text (templates and contexts are validated on the way in). */
uint32_t u8next(const char *s, size_t *i); /* the code point at s[*i], advancing *i */
size_t u8count(const char *s, size_t n);
bool u8valid(const char *s, size_t n);
bool py_isspace(uint32_t cp); /* Python's str.isspace(), which is also re's \s */

/* ---------------------------------------------------------------- values (value.c) */

typedef enum {
    V_UNDEF, /* Jinja2's Undefined: prints empty, falsy, iterates empty; s.p: the error its misuse reports */
    V_NONE,
    V_BOOL,
    V_INT,
    V_FLOAT,
    V_STR,
    V_LIST,
    V_TUPLE,
    V_DICT,
    V_NS,     /* namespace(): a dict whose attributes templates may assign */
    V_LOOP,   /* the loop variable of a for */
    V_MACRO,  /* a {% macro %} */
    V_FUNC,   /* a global function (methods.c) */
    V_METHOD, /* a method bound to its object (methods.c) */
    V_NOARG,  /* internal: "not passed" in bound arguments; never reaches a template */
} vkind;

/* How a V_LIST came about, where Python would have a different object with other behaviour. */
enum {
    VIEW_NONE,
    VIEW_ITEMS,  /* dict.items(): prints as dict_items([...]) */
    VIEW_KEYS,   /* dict.keys() */
    VIEW_VALUES, /* dict.values() */
    VIEW_GEN,    /* a generator (select, map, ...): always true, no len(), not subscriptable, one pass */
    VIEW_RANGE,  /* range(): cannot be printed here */
};

typedef struct list list;
typedef struct dict dict;
typedef struct loopv loopv;
typedef struct method method;
typedef struct node node;

typedef struct value {
    uint8_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        list *l;
        dict *d;
        loopv *loop;
        struct macro *macro;
        int fn;
        method *m;
    };
} value;

struct list {
    size_t n, cap, pos; /* pos: items a generator has already yielded */
    value *v;
    uint8_t view;
};
struct dict {
    size_t n, cap;
    value *k, *v;
};
struct loopv {
    list *items;
    size_t i;
};
struct macro {
    const node *def;
    struct scope *sc; /* where it was defined: names it does not bind resolve there, when called */
};
struct method {
    value self;
    int id;
    const char *name;
};

extern const value V_UNDEFINED, V_NONE_VALUE, V_MISSING;
value v_bool(bool b);
value v_int(int64_t i);
value v_float(double f);
value v_str(const char *p, size_t n);
value v_cstr(const char *s);
value v_undef(const char *what);
value v_list(tctx *c, size_t cap, uint8_t kind); /* V_LIST or V_TUPLE, empty */
void list_push(tctx *c, list *l, value v);
value v_dict(tctx *c);
value *dict_get(const dict *d, value key); /* NULL when absent */
value *dict_getn(const dict *d, const char *key, size_t n);
void dict_set(tctx *c, dict *d, value key, value v);

const char *type_name(value v); /* Python's type name, for messages */
bool truthy(value v);
bool is_num(value v); /* bool, int or float (bool is an int in Python) */
double as_double(value v);
bool v_eq(value a, value b);
/* Python's a < b (-1), a == b (0), a > b (1) for comparable values; fails (at line) otherwise. */
int v_cmp(tctx *c, int line, value a, value b);
/* str(v) and repr(v) as Python writes them, appended to b. */
void v_str_to(tctx *c, int line, tbuf *b, value v);
void v_repr_to(tctx *c, int line, tbuf *b, value v);
value v_to_str(tctx *c, int line, value v); /* str(v) as a V_STR */
void float_repr(double f, char out[32]);
/* The items of an iterable value (a string's code points are made into strings); fails for
 * values Python cannot iterate. Generators are consumed. */
list *v_iter(tctx *c, int line, value v);
/* len(v); fails where Python has no len(). */
int64_t v_len(tctx *c, int line, value v);

/* ---------------------------------------------------------------- JSON (json.c) */

value json_to_value(tctx *c, const cJSON *j);
typedef struct json_style {
    const char *indent; /* NULL: one line */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} json_style;
void json_dump(tctx *c, int line, tbuf *b, value v, const json_style *st);

/* ---------------------------------------------------------------- tokens (lex.c) */

typedef enum {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP
} tkind;
typedef enum {
    OP_ADD,
    OP_SUB,
    OP_DIV,
    OP_FLOORDIV,
    OP_MUL,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GTEQ,
    OP_LT,
    OP_LTEQ,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
    /* operators of the syntax tree only */
    OP_IN,
    OP_NOTIN,
} opkind;

typedef struct token {
    uint8_t kind, op;
    int line;
    const char *p; /* T_DATA, T_NAME: the text (NUL-terminated copy) */
    size_t n;
    value k; /* T_STRING, T_INT, T_FLOAT */
} token;

/* The tokens of a template, ending with T_EOF. */
token *lex(tctx *c, const char *src, size_t *ntok);

/* ---------------------------------------------------------------- syntax tree (parse.c) */

typedef enum {
    /* statements */
    S_TEXT,
    S_OUTPUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SET_BLOCK,
    S_MACRO,
    S_FILTER_BLOCK,
    S_SCOPE,
    S_BREAK,
    S_CONTINUE,
    /* expressions */
    E_CONST,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT,
    E_GETATTR,
    E_GETITEM,
    E_SLICE,
    E_CALL,
    E_FILTER,
    E_TEST,
    E_NEG,
    E_POS,
    E_NOT,
    E_BIN,
    E_AND,
    E_OR,
    E_COMPARE,
    E_CONCAT,
    E_COND,
} nkind;

typedef struct nodes {
    node **v;
    int n, cap;
} nodes;

/* One node type for all: the fields each kind uses are listed beside it.
 *   S_TEXT s,n  S_OUTPUT a  S_IF a body orelse  S_FOR names a(iter) b(filter|NULL) body orelse
 *   S_SET names a (or, assigning namespace.attribute, s attr a)  S_SET_BLOCK the same targets,
 *   body, a: a filter chain ending in a NULL operand, or NULL
 *   S_MACRO s(name) names(params) args(defaults of the last params) body
 *   (targets: op set when the names unpack a tuple)  S_FILTER_BLOCK body a(chain)  S_SCOPE body ({% generation %}: a scope of its own)
 *   E_CONST k  E_NAME s  E_LIST/E_TUPLE args  E_DICT args (key, value, key, ...)  E_GETATTR a s
 *   E_GETITEM a b  E_SLICE a b c (each may be NULL)  E_CALL a args kw  E_FILTER/E_TEST a fn args kw
 *   E_NEG/E_POS/E_NOT a  E_BIN op a b  E_AND/E_OR a b  E_COMPARE a args(operands) ops
 *   E_CONCAT args  E_COND a(test) b(then) c(else|NULL) */
struct node {
    uint8_t kind, op;
    int line;
    int fn;        /* filter or test number (filters.c) */
    const char *s; /* NUL-terminated */
    size_t n;
    const char *attr; /* S_SET, S_SET_BLOCK: the namespace attribute assigned */
    value k;
    node *a, *b, *c;
    nodes args, kw, body, orelse;
    const char **names; /* targets, parameters, or the keyword names of kw */
    int nnames;
    uint8_t *ops;
};

node *parse(tctx *c, token *toks, size_t ntok); /* the template's statements as an S_SCOPE body */

/* ---------------------------------------------------------------- filters and tests (filters.c) */

int filter_lookup(const char *name); /* -1: not a Jinja2 filter; -2: one this subset lacks */
int test_lookup(const char *name);

typedef struct render render;
typedef struct scope scope;
typedef struct args {
    int n, nkw;
    const value *v, *kw;
    const char *const *kwnames;
} args;

value apply_filter(render *r, int line, int fn, value v, const args *a);
bool apply_test(render *r, int line, int fn, value v, const args *a);
/* Parse-time check of the filter or test named by a string literal argument (select('x'),
 * map('x'), ...), so that an unknown one is refused before rendering. */
void filter_check_args(tctx *c, const node *f);
/* Binds a call's arguments to the named parameters of fname (out[i] is V_MISSING where not
 * passed), refusing extra or unknown ones as Python would. */
void bind_args(render *r, int line, const char *fname, const args *a, int nparam, const char *const *params,
               value *out);

/* ---------------------------------------------------------------- methods and globals (methods.c) */

enum {
    FN_RAISE_EXCEPTION,
    FN_STRFTIME_NOW,
    FN_NAMESPACE,
    FN_RANGE,
    FN_DICT,
    FN_CYCLER,
    FN_JOINER,
    FN_LIPSUM,
    FN_COUNT
};
/* Binds the global functions in the root scope. */
void add_globals(render *r, scope *root);
/* The value of attribute name of v when v is a str, dict, list or loop: a bound method, a
 * loop variable, or V_UNDEF (with the sandbox's refusal for methods that would modify). */
bool method_lookup(render *r, int line, value v, const char *name, size_t n, value *out);
value call_builtin(render *r, int line, value fn, const args *a);
enum { CASE_LOWER, CASE_UPPER, CASE_SWAP, CASE_TITLE, CASE_CAPITALIZE };
/* Python's str.lower(), upper(), swapcase(), title(), capitalize() */
value str_case(render *r, int line, value s, int mode);
value str_splitlines(render *r, value s, bool keepends);
value str_split(render *r, int line, value s, value sep, int64_t maxsplit, bool from_right);
value str_strip(render *r, int line, value s, value chars, bool left, bool right);
value str_replace(render *r, int line, value s, value old, value new, int64_t count);

/* ---------------------------------------------------------------- rendering (eval.c) */

struct render {
    tctx c;
    scope *root;
    int depth; /* macro calls */
};

value eval(render *r, scope *sc, const node *e);
value getattr_v(render *r, int line, value obj, const char *name, size_t n);
value getitem_v(render *r, int line, value obj, value key);
value call_value(render *r, int line, value fn, const args *a);
value binary_op(render *r, int line, int op, value a, value b);     /* + - * / // % ** */
bool compare_values(render *r, int line, int op, value a, value b); /* == != < <= > >= in, not in */
/* Renders the template's statements with the given root variables into *out. */
void render_template(render *r, const node *tree, tbuf *out);
void scope_set(render *r, scope *sc, const char *name, value v);
scope *scope_new(render *r, scope *parent);

#endif
