/* `loom plan`: prints the module tree and the execution plan of a model. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_plan(int argc, char **argv) {
    cli_common c = CLI_COMMON_DEFAULTS;
    for (int i = 0; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (!r) {
            fprintf(stderr, "loom plan: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    c.dummy = c.dummy || (c.model && strstr(c.model, ".json"));
    loom_model *m = cli_load_model(&c, false);
    if (!m) return 1;
    loom_err err = {{0}};
    loom_engine_options eo = cli_engine_options(&c);
    int rc = loom_print_plan(m, c.tp > 0 ? c.tp : 1, &eo, stdout, &err);
    if (rc) fprintf(stderr, "loom plan: %s\n", err.msg);
    loom_model_free(m);
    return rc ? 1 : 0;
}
