/* How the tests start an MPI job on this machine: as root (CI runs as root), over loopback
 * TCP only (no network is configured), oversubscribed (more ranks than the 2 cores). Leak
 * checking is off for the MPI processes alone: Open MPI's components leak at MPI_Finalize and
 * are unloaded by then, so their reports cannot even be suppressed by name; addresses and
 * undefined behaviour are still checked. */
#ifndef LOOM_TESTS_MPIRUN_H
#define LOOM_TESTS_MPIRUN_H
#include <stdio.h>

/* A build configured with -DLOOM_MPI=OFF (LOOM_HAVE_MPI 0, e.g. the aarch64 cross build) has no
 * MPI backend: the tests skip their MPI cases and say so once. */
static inline int mpi_available(const char *test) {
    static int said;
    if (!LOOM_HAVE_MPI && !said++) printf("%s: MPI cases skipped (this build has no MPI backend)\n", test);
    return LOOM_HAVE_MPI;
}
#define MPIRUN                                                                                                         \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp "                                 \
    "OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo ASAN_OPTIONS=detect_leaks=0 "                       \
    "mpirun --oversubscribe"
#endif
