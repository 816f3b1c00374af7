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
    /* with --speculative-config: the target's plan with what the draft reads (an Eagle3 draft's
     * captures), then the draft's own */
    int rc = cli_load_speculation(&c) || cli_spec_engine_options(&c, m, &eo) ? -2 : 0;
    if (!rc) rc = loom_print_plan(m, c.tp > 0 ? c.tp : 1, &eo, stdout, &err);
    if (!rc && c.draft) {
        int dtp = c.spec.draft_tensor_parallel_size ? c.spec.draft_tensor_parallel_size : c.tp > 0 ? c.tp : 1;
        loom_engine_options de = {.capture_last = c.spec.method == LOOM_SPEC_EAGLE3};
        printf("\n== the draft, %s, at -tp %d%s:\n", c.spec.model, c.pp > 1 ? 1 : dtp,
               c.pp > 1 ? " (whole on every rank beside the pipeline's stages)" : "");
        rc = loom_print_plan(c.draft, c.pp > 1 ? 1 : dtp, &de, stdout, &err);
    }
    if (rc == -1) fprintf(stderr, "loom plan: %s\n", err.msg);
    cli_free(&c, m);
    return rc ? 1 : 0;
}
