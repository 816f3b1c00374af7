/* The shared-memory backend: ranks are processes on one machine that share an anonymous
 * MAP_SHARED arena created before they fork (so nothing named is ever left behind). Every
 * rank can read every rank's slots in place. */
#ifndef LOOM_COMM_SHM_H
#define LOOM_COMM_SHM_H
#include "comm/comm.h"

typedef struct shm_arena shm_arena;

/* Maps an arena for a job of layout l, with exchange and message slots of slot_bytes each. */
shm_arena *shm_arena_create(const comm_layout *l, size_t slot_bytes, double timeout_s, int spin, loom_err *err);
void shm_arena_destroy(shm_arena *a);
/* In a rank process after fork: its communicator over the arena, among all the job's ranks
 * (comm_split gives its groups'); NULL when out of memory. */
loom_comm *comm_shm(shm_arena *a, int rank);
/* Supervisor side: stop every rank's waiting (a rank failed), and read a rank's phase. */
void shm_arena_abort(shm_arena *a);
const char *shm_arena_phase(const shm_arena *a, int rank);

#endif
