/* The GBNF that forces a tool call in a model family's format (see tool_calls.h): each tool's
 * arguments follow its parameters schema (json_schema_rules), wrapped in the family's markers.
 * Markers that are special tokens in the family's tokenizer are written here as their text:
 * grammars never produce special tokens, so a forced call spells them out, and the parser reads
 * the text the same either way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "serve/tool_grammar.h"
#include "util/err.h"

/* The grammar text of one call to tool i (its arguments rule `tool<i>`) in p's format. */
static void gbnf_call(gbuf *b, tool_parser p, const char *json_name, int i) {
    char pre[64];
    switch (p) {
    case TOOL_PARSER_HERMES:
        gbuf_printf(b, "\"<tool_call>\\n{\\\"name\\\": \" ");
        gbuf_literal(b, json_name, strlen(json_name));
        gbuf_printf(b, " \", \\\"arguments\\\": \" tool%d \"}\\n</tool_call>\"", i);
        return;
    case TOOL_PARSER_DEEPSEEK_V3:
        gbuf_literal(b, DS_CALL_BEGIN "function" DS_SEP, strlen(DS_CALL_BEGIN "function" DS_SEP));
        gbuf_puts(b, " ");
        /* the bare name: its JSON form without the quotes */
        gbuf_literal(b, json_name + 1, strlen(json_name) - 2);
        gbuf_printf(b, " \"\\n```json\\n\" tool%d \"\\n```\" ", i);
        gbuf_literal(b, DS_CALL_END, strlen(DS_CALL_END));
        return;
    default:
        snprintf(pre, sizeof pre, "%s", p == TOOL_PARSER_LLAMA3_JSON ? "parameters" : "arguments");
        gbuf_puts(b, "\"{\\\"name\\\": \" ");
        gbuf_literal(b, json_name, strlen(json_name));
        gbuf_printf(b, " \", \\\"%s\\\": \" tool%d \"}\"", pre, i);
        return;
    }
}

char *tool_calls_gbnf(tool_parser p, const cJSON *tools, const char *only, bool parallel, loom_err *err) {
    if (p == TOOL_PARSER_NONE || p == TOOL_PARSER_PYTHONIC) { /* pythonic arguments are Python, not JSON */
        loom_errf(err, "calls cannot be forced in the %s format", tool_parser_name(p));
        return NULL;
    }
    gbuf rules = {0}, call = {0};
    int i = 0, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        int idx = i++;
        if (only && strcmp(name->valuestring, only)) continue;
        char rule[32];
        snprintf(rule, sizeof rule, "tool%d", idx);
        cJSON *any = params ? NULL : cJSON_Parse("{\"type\": \"object\"}");
        if (json_schema_rules(params ? params : any, rule, &rules, err)) {
            cJSON_Delete(any);
            loom_err_prefix(err, "tools[%d].function.parameters", idx);
            gbuf_free(&rules);
            gbuf_free(&call);
            return NULL;
        }
        cJSON_Delete(any);
        char *json_name = cJSON_PrintUnformatted(name);
        if (!json_name) {
            call.oom = true;
            break;
        }
        gbuf_puts(&call, n++ ? " | " : "");
        gbuf_puts(&call, "(");
        gbnf_call(&call, p, json_name, idx);
        gbuf_puts(&call, ")");
        free(json_name);
    }
    gbuf g = {0};
    const char *more = parallel ? "*" : "";
    gbuf_printf(&g, "call ::= %s\n", call.p ? call.p : "");
    switch (p) {
    case TOOL_PARSER_HERMES: gbuf_printf(&g, "root ::= call (\"\\n\" call)%s\n", more); break;
    case TOOL_PARSER_LLAMA3_JSON: gbuf_printf(&g, "root ::= call (\"; \" call)%s\n", more); break;
    case TOOL_PARSER_MISTRAL: gbuf_printf(&g, "root ::= \"[TOOL_CALLS][\" call (\", \" call)%s \"]\"\n", more); break;
    case TOOL_PARSER_GRANITE: gbuf_printf(&g, "root ::= \"<|tool_call|>[\" call (\", \" call)%s \"]\"\n", more); break;
    default:
        gbuf_puts(&g, "root ::= ");
        gbuf_literal(&g, DS_CALLS_BEGIN, strlen(DS_CALLS_BEGIN));
        gbuf_printf(&g, " call%s ", parallel ? "+" : "");
        gbuf_literal(&g, DS_CALLS_END, strlen(DS_CALLS_END));
        gbuf_puts(&g, "\n");
        break;
    }
    gbuf_put(&g, rules.p ? rules.p : "", rules.len);
    bool oom = g.oom || rules.oom || call.oom;
    gbuf_free(&rules);
    gbuf_free(&call);
    if (oom) {
        gbuf_free(&g);
        loom_errf(err, "out of memory writing a tool call grammar");
        return NULL;
    }
    return g.p;
}
