/* loom_version: the version this library was built as, for a program to compare with the
 * LOOM_VERSION of the header it was compiled against. */
#include "loom.h"

const char *loom_version(void) { return LOOM_VERSION; }
