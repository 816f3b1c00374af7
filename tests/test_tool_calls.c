/* The tool-call parsers (src/serve/tool_calls.c): each family's format over outputs written as
 * its models write them (several calls, text around them, malformed calls that stay content);
 * the stream fed in every split (byte by byte, in random chunks) gives the whole parse's calls
 * and content; the parser detected from every chat template under tests/data/templates; a
 * streaming detokenizer that keeps special tokens (the markers of some families) when asked. */
#include <stdint.h>

#include "check.h"
#include "serve/tool_calls.h"
#include "util/file.h"

typedef struct expect {
    tool_parser parser;
    const char *text;
    const char *content; /* NULL: none */
    int n_calls;
    const char *calls[3][2]; /* name, arguments */
} expect;

static const expect cases[] = {
    /* hermes: Qwen2.5/3 */
    {TOOL_PARSER_HERMES,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
     NULL,
     1,
     {{"get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}"}}},
    {TOOL_PARSER_HERMES,
     "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
     "\"b\", \"arguments\": {\"x\": [1, 2, {\"y\": \"}\"}]}}\n</tool_call>",
     "Let me check both.\n",
     2,
     {{"a", "{}"}, {"b", "{\"x\":[1,2,{\"y\":\"}\"}]}"}}},
    {TOOL_PARSER_HERMES,
     "Sure <tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": 1}}\n</tool_call>\nDone.",
     "Sure Done.",
     1,
     {{"a", "{\"q\":1}"}}},
    {TOOL_PARSER_HERMES,
     "<tool_call>\n{\"name\": oops}\n</tool_call>",
     "<tool_call>\n{\"name\": oops}\n</tool_call>",
     0,
     {{0}}},
    {TOOL_PARSER_HERMES, "no calls < here <tool", "no calls < here <tool", 0, {{0}}},
    {TOOL_PARSER_HERMES,
     "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 2}\"}</tool_call>",
     NULL,
     1,
     {{"f", "{\"a\":2}"}}},
    /* llama3_json: Llama 3.1-3.3 */
    {TOOL_PARSER_LLAMA3_JSON,
     "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"loom\"}}",
     NULL,
     1,
     {{"search", "{\"query\":\"loom\"}"}}},
    {TOOL_PARSER_LLAMA3_JSON,
     "{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
     NULL,
     2,
     {{"a", "{\"n\":1}"}, {"b", "{}"}}},
    {TOOL_PARSER_LLAMA3_JSON, "The answer is {not a call}.", "The answer is {not a call}.", 0, {{0}}},
    {TOOL_PARSER_LLAMA3_JSON, "{\"answer\": 42}", "{\"answer\": 42}", 0, {{0}}},
    /* mistral: the JSON array, and v11's NAME[ARGS]{...} */
    {TOOL_PARSER_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"1\"}}, {\"name\": \"b\", \"arguments\": {}}]",
     NULL,
     2,
     {{"a", "{\"x\":\"1\"}"}, {"b", "{}"}}},
    {TOOL_PARSER_MISTRAL,
     "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_time[ARGS]{}",
     "Checking.",
     2,
     {{"get_weather", "{\"city\":\"Oslo\"}"}, {"get_time", "{}"}}},
    {TOOL_PARSER_MISTRAL, "[TOOL_CALLS] nonsense", "[TOOL_CALLS] nonsense", 0, {{0}}},
    /* deepseek_v3: V3/R1, and V3.1 */
    {TOOL_PARSER_DEEPSEEK_V3,
     "I will look.\n" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP
     "get_weather\n```json\n{\"city\": \"Rome\"}\n```" DS_CALL_END "\n" DS_CALL_BEGIN "function" DS_SEP
     "get_time\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
     "I will look.\n",
     2,
     {{"get_weather", "{\"city\":\"Rome\"}"}, {"get_time", "{}"}}},
    {TOOL_PARSER_DEEPSEEK_V3,
     DS_CALLS_BEGIN DS_CALL_BEGIN "f" DS_SEP "{\"a\": true}" DS_CALL_END DS_CALLS_END,
     NULL,
     1,
     {{"f", "{\"a\":true}"}}},
    {TOOL_PARSER_DEEPSEEK_V3, DS_CALLS_BEGIN "garbage", DS_CALLS_BEGIN "garbage", 0, {{0}}},
    /* granite */
    {TOOL_PARSER_GRANITE,
     "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"k\": null}}, {\"name\": \"b\", \"arguments\": {}}]",
     NULL,
     2,
     {{"a", "{\"k\":null}"}, {"b", "{}"}}},
    {TOOL_PARSER_GRANITE, "Calling. <tool_call> [{\"name\": \"a\", \"arguments\": {}}]", "Calling. ", 1, {{"a", "{}"}}},
    /* pythonic */
    {TOOL_PARSER_PYTHONIC,
     "[get_weather(city='San Francisco', metric=\"celsius\"), get_time(), f(a=1, b=-2.5e3, c=True, d=None, "
     "e=[1, 'x', (2, 3)], g={'k': {\"n\": False}})]",
     NULL,
     3,
     {{"get_weather", "{\"city\":\"San Francisco\",\"metric\":\"celsius\"}"},
      {"get_time", "{}"},
      {"f", "{\"a\":1,\"b\":-2500,\"c\":true,\"d\":null,\"e\":[1,\"x\",[2,3]],\"g\":{\"k\":{\"n\":false}}}"}}},
    {TOOL_PARSER_PYTHONIC, "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", 0, {{0}}},
    {TOOL_PARSER_PYTHONIC, "Hello [f(x=1)]", "Hello [f(x=1)]", 0, {{0}}},
    {TOOL_PARSER_PYTHONIC, "[f(s='it\\'s')]", NULL, 1, {{"f", "{\"s\":\"it's\"}"}}},
};

/* What one feeding gives: the content joined, the calls in order. */
typedef struct got {
    char content[1024];
    size_t clen;
    int n_calls;
    char *calls[8][2];
} got;

static void got_free(got *g) {
    for (int i = 0; i < g->n_calls; i++) free(g->calls[i][0]), free(g->calls[i][1]);
}

/* Feeds text in pieces ending at cuts[0..n_cuts) then the end. */
static void feed(tool_parser p, const char *text, const size_t *cuts, int n_cuts, got *g) {
    memset(g, 0, sizeof *g);
    tool_stream s = {.parser = p};
    size_t len = strlen(text);
    for (int c = 0; c <= n_cuts; c++) {
        bool done = c == n_cuts;
        size_t upto = done ? len : cuts[c];
        tool_item it;
        loom_err err = {{0}};
        int rc;
        while ((rc = tool_stream_next(&s, text, upto, done, &it, &err)) == 1) {
            CHECK(it.to <= upto, "an item past the text fed");
            if (it.is_call) {
                if (g->n_calls < 8) g->calls[g->n_calls][0] = it.name, g->calls[g->n_calls][1] = it.arguments;
                else free(it.name), free(it.arguments);
                g->n_calls++;
            } else if (g->clen + it.to - it.from < sizeof g->content) {
                memcpy(g->content + g->clen, text + it.from, it.to - it.from);
                g->clen += it.to - it.from;
            }
        }
        CHECK(rc == 0, "%s", err.msg);
    }
}

static bool same(const got *a, const got *b) {
    if (a->clen != b->clen || memcmp(a->content, b->content, a->clen) || a->n_calls != b->n_calls) return false;
    for (int i = 0; i < a->n_calls && i < 8; i++)
        if (strcmp(a->calls[i][0], b->calls[i][0]) || strcmp(a->calls[i][1], b->calls[i][1])) return false;
    return true;
}

static void test_case(int k, const expect *e) {
    tool_parse t;
    loom_err err = {{0}};
    size_t len = strlen(e->text);
    CHECK(tool_calls_parse(e->parser, e->text, len, 100, &t, &err) == 0, "case %d: %s", k, err.msg);
    CHECK(t.n_calls == e->n_calls, "case %d: %d calls, expected %d", k, t.n_calls, e->n_calls);
    for (int i = 0; i < t.n_calls && i < e->n_calls; i++) {
        CHECK(!strcmp(t.calls[i].name, e->calls[i][0]), "case %d call %d: name %s", k, i, t.calls[i].name);
        CHECK(!strcmp(t.calls[i].arguments, e->calls[i][1]), "case %d call %d: arguments %s", k, i,
              t.calls[i].arguments);
    }
    CHECK(e->content ? t.content && !strcmp(t.content, e->content) : !t.content, "case %d: content [%s]", k,
          t.content ? t.content : "(null)");
    tool_parse_free(&t);
    tool_parse one;
    CHECK(tool_calls_parse(e->parser, e->text, len, 1, &one, &err) == 0 && one.n_calls == (e->n_calls > 0),
          "case %d: max_calls 1", k);
    tool_parse_free(&one);

    /* the stream, whole, byte by byte, and in random chunks */
    got whole, split;
    feed(e->parser, e->text, NULL, 0, &whole);
    CHECK(whole.n_calls == e->n_calls, "case %d: stream whole", k);
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i;
    feed(e->parser, e->text, cuts, (int)len, &split);
    CHECK(same(&whole, &split), "case %d: byte by byte differs", k);
    got_free(&split);
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    for (int round = 0; round < 50; round++) {
        int n = 0;
        for (size_t at = 0;;) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            at += 1 + (rng >> 33) % 9;
            if (at >= len) break;
            cuts[n++] = at;
        }
        feed(e->parser, e->text, cuts, n, &split);
        CHECK(same(&whole, &split), "case %d round %d: random chunks differ", k, round);
        got_free(&split);
    }
    free(cuts);
    got_free(&whole);
}

/* The parser each template under tests/data/templates gets. */
static void test_detect(void) {
    static const struct {
        const char *dir;
        tool_parser p;
    } want[] = {
        {"chatml", TOOL_PARSER_NONE},          {"deepseek-r1", TOOL_PARSER_DEEPSEEK_V3},
        {"gemma2", TOOL_PARSER_NONE},          {"granite3.3", TOOL_PARSER_GRANITE},
        {"llama3.2", TOOL_PARSER_LLAMA3_JSON}, {"llama3.3", TOOL_PARSER_LLAMA3_JSON},
        {"mistral-nemo", TOOL_PARSER_MISTRAL}, {"phi3", TOOL_PARSER_NONE},
        {"qwen2.5", TOOL_PARSER_HERMES},       {"qwen3", TOOL_PARSER_HERMES},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/data/templates/%s/template.jinja", LOOM_SOURCE_DIR, want[i].dir);
        loom_err err = {{0}};
        char *src = file_read_all(path, NULL, &err);
        CHECK(src != NULL, "%s", err.msg);
        tool_parser got = tool_parser_detect(src);
        CHECK(got == want[i].p, "%s: detected %s, expected %s", want[i].dir, tool_parser_name(got),
              tool_parser_name(want[i].p));
        free(src);
    }
    CHECK(tool_parser_detect("[func_name1(params_name1=params_value1)]") == TOOL_PARSER_PYTHONIC, "pythonic");
    for (int p = TOOL_PARSER_HERMES; p <= TOOL_PARSER_PYTHONIC; p++)
        CHECK((int)tool_parser_find(tool_parser_name((tool_parser)p)) == p, "name %d", p);
    CHECK(tool_parser_find("hermes2") == TOOL_PARSER_NONE, "unknown name");
}

/* The embedded model's <s> (a special token) spelt out only when the detokenizer keeps them. */
static void test_keep_special(void) {
    loom_err err = {{0}};
    loom_model_options mo = {.load_tokenizer = true};
    loom_model *m = loom_model_load(&mo, &err);
    CHECK(m != NULL, "%s", err.msg);
    if (!m) return;
    int32_t *ids;
    size_t n;
    CHECK(!loom_tokenize(m, "<s>", false, &ids, &n, &err) && n == 1, "<s> is one token: %s", err.msg);
    for (int keep = 0; keep < 2; keep++) {
        loom_detokenizer *d = loom_detokenizer_new(m, &err);
        loom_detokenizer_keep_special(d, keep);
        size_t len;
        const char *piece = loom_detokenizer_next(d, ids[0], &len);
        CHECK(keep ? len == 3 && !memcmp(piece, "<s>", 3) : len == 0, "keep %d: [%.*s]", keep, (int)len, piece);
        loom_detokenizer_free(d);
    }
    free(ids);
    loom_model_free(m);
}

int main(void) {
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) test_case((int)k, &cases[k]);
    test_detect();
    test_keep_special();
    return check_done();
}
