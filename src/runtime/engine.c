/* The engine: builds this rank's plans from a model and the engine options (one derivation of
 * plan options, engine_plan_options), sizes the context to the KV budget, and hands the plans
 * to the executor, which allocates what they run on, once; loom_forward checks a batch and
 * runs it through the executor, or through the pipeline's stages. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/rope_freq.h"
#include "plan/stage.h"
#include "runtime/bind.h"
#include "runtime/engine.h"
#include "runtime/topology.h"
#include "util/alloc.h"
#include "util/err.h"

static int round_up(int n, int k) { return (n + k - 1) / k * k; }

/* By default a rank runs a thread on each core it was placed on (runtime/topology.c), or, left
 * unplaced, on its share of the cores this process sees. */
static void set_threads(int threads, int ranks) {
    if (threads <= 0) threads = topology_cores();
    if (threads <= 0) threads = omp_get_num_procs() / ranks > 0 ? omp_get_num_procs() / ranks : 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    topology_pin_threads(threads);
}

/* Tensors no op reads, reported by the first rank of each stage for its own part (under expert
 * parallelism, without the other ranks' experts); a vision-language model's vision tower, which
 * loom does not run, is said once as such. */
static void warn_unused(const loom_model *m, const plan *p) {
    char **unused = weights_unused(&m->ws);
    if (!unused) return; /* out of memory for the list: no warning */
    int n = 0, first = -1, vision = 0;
    for (int i = 0; unused[i]; i++) {
        char buf[256];
        const char *tree_name = weights_tree_name(unused[i], buf, sizeof buf); /* as the stages name it */
        if (m->cfg.text_of_vlm && !strncmp(unused[i], "model.visual.", 13)) vision++;
        else if (!stage_foreign_tensor(&p->o, m->tree, tree_name) && !ep_foreign_tensor(p, tree_name) && n++ == 0)
            first = i;
    }
    if (vision && p->o.stage == 0)
        fprintf(stderr,
                "loom: %s: the text model of a vision-language model; its vision tower (%d tensors) is not loaded\n",
                m->ws.dir, vision);
    if (n)
        fprintf(stderr, "loom: warning: %s: %d tensor%s not used by %s, e.g. '%s'\n", m->ws.dir, n, n > 1 ? "s" : "",
                m->cfg.arch, unused[first]);
    free(unused);
}

plan_options engine_plan_options(const loom_model *m, const loom_engine_options *o, int tp, int rank, int replica,
                                 int pp, int stage, int layer0, int layer1) {
    plan_options po = {.tp = tp,
                       .rank = rank,
                       .dp = engine_replicas(o),
                       .replica = replica,
                       .sp = o->sequence_parallel,
                       .async_tp = o->async_tp,
                       .ep = o->expert_parallel,
                       .quant = m->ws.quant,
                       .checkpoint = &m->cfg.quant,
                       .exact = m->ws.exact,
                       .fp8_act = m->ws.fp8_act,
                       .pp = pp,
                       .stage = stage,
                       .layer0 = layer0,
                       .layer1 = layer1,
                       .n_capture_layers = o->n_capture_layers,
                       .capture_last = o->capture_last,
                       .expert_load = o->expert_load,
                       .redundant_experts = o->redundant_experts};
    memcpy(po.capture_layers, o->capture_layers, sizeof o->capture_layers);
    return po;
}

int *engine_stages(const loom_model *m, const loom_engine_options *o, int *pp, loom_err *err) {
    *pp = o->pipeline_parallel > 1 ? o->pipeline_parallel : 1;
    int *first = mem_zalloc(*pp + 1, sizeof *first, "the stages", err);
    if (first && stage_layers(stage_count_layers(m->tree), *pp, o->pp_layer_partition, first, err)) {
        free(first);
        return NULL;
    }
    return first;
}

int engine_replicas(const loom_engine_options *o) { return o->data_parallel > 1 ? o->data_parallel : 1; }

/* This rank's place in the job: its replica's and its stage's communicators (split from the
 * job's, whose layout must be the one o asks for), the experts' group, and its decoder layers. */
static int join_groups(loom_engine *e, const loom_engine_options *o, loom_comm *job, int *pp, loom_err *err) {
    executor *x = &e->x;
    int dp = engine_replicas(o), *first = engine_stages(e->model, o, pp, err), rc = first ? 0 : -1;
    const comm_layout *l = &job->layout;
    if (!rc && (job->size % (*pp * dp) || l->dp != dp || l->pp != *pp))
        rc = loom_errf(err, "-dp %d x -pp %d: the job's %d ranks were started as -tp %d x -dp %d x -pp %d", dp, *pp,
                       job->size, l->tp, l->dp, l->pp);
    x->world = x->comm = x->ep_comm = job;
    if (!rc && dp > 1) rc = comm_split(job, GROUP_REPLICA, &e->replica_comm, err);
    if (!rc && (dp > 1 || *pp > 1)) rc = comm_split(job, GROUP_TP, &e->own_comm, err);
    if (!rc && dp > 1) rc = comm_split(job, GROUP_EP, &e->ep_comm, err);
    if (!rc) {
        x->world = dp > 1 ? e->replica_comm : job;
        x->comm = e->own_comm ? e->own_comm : job;
        x->ep_comm = dp > 1 ? e->ep_comm : x->comm;
        /* a stage's experts wait for the other replicas' same stage, which may wait for a hand-over */
        if (dp > 1 && *pp > 1) x->ep_comm->deadline_scale = COMM_HANDOVER_WAIT;
        x->stage = comm_stage_of(l, job->rank);
        e->replica = comm_replica_of(l, job->rank);
        e->layer0 = first[x->stage], e->layer1 = first[x->stage + 1];
    }
    free(first);
    return rc;
}

/* Rows an engine with these options runs at most: all tokens, and the rows with logits. */
static void engine_rows(const loom_engine_options *o, int *tokens, int *logits) {
    int seqs = o->max_seqs > 0 ? o->max_seqs : 1;
    *tokens = o->max_tokens > 0 ? o->max_tokens : 512;
    *logits = o->all_logits ? *tokens : o->max_logits > 0 ? o->max_logits : seqs;
    if (*logits > *tokens) *logits = *tokens;
}

size_t loom_comm_slot_bytes(const loom_model *m, int tp, const loom_engine_options *o) {
    plan p;
    loom_err err;
    int tokens, logits;
    engine_rows(o, &tokens, &logits);
    /* pipeline: a stage sends at most every token's hidden state, and the last broadcasts logits;
     * a server's replica sends rank 0 its logits */
    size_t pipe = o->pipeline_parallel > 1 ? (size_t)round_up(tokens, tp) * stage_hidden_width(m->tree) : 0;
    if ((o->pipeline_parallel > 1 || engine_replicas(o) > 1) && (size_t)logits * m->cfg.head_vocab > pipe)
        pipe = (size_t)logits * m->cfg.head_vocab;
    plan_options po = engine_plan_options(m, o, tp, 0, 0, 1, 0, 0, 0);
    if (plan_build(&p, m->tree, &po, &err)) return 0;
    tokens = round_up(tokens, tp);
    /* an expert-parallel dispatch sends each of this rank's tokens/tp rows to at most every rank
     * of the stage's dp x tp; sliced experts send every replica's rows' partial sums */
    size_t need[3] = {(size_t)tokens * p.max_comm_cols[ROWS_TOKENS] * (plan_experts_span(&p.o) ? p.o.dp : 1),
                      (size_t)tokens / tp * p.max_comm_cols[ROWS_SHARD],
                      (size_t)logits * (p.max_comm_cols[ROWS_LOGITS] > p.max_comm_cols[ROWS_SHARD]
                                            ? p.max_comm_cols[ROWS_LOGITS]
                                            : p.max_comm_cols[ROWS_SHARD])};
    plan_free(&p);
    size_t most = need[0] > need[1] ? need[0] : need[1];
    most = most > need[2] ? most : need[2];
    most = most > pipe ? most : pipe;
    if (m->cfg.vision.kind && (size_t)VISION_REDUCE_ROWS * m->cfg.vision.hidden > most) /* the tower's all-reduces */
        most = (size_t)VISION_REDUCE_ROWS * m->cfg.vision.hidden;
    /* and room for the small exchanges beside the plan's: the replicas' token counts, a
     * benchmark's per-rank figures */
    return (most > 1024 ? most : 1024) * sizeof(float);
}

int loom_check_sharding(const loom_model *m, int tp, const loom_engine_options *o, loom_err *err) {
    int pp, *first = engine_stages(m, o, &pp, err), rc = 0;
    if (!first) return loom_err_prefix(err, "%s cannot run with -pp %d", m->cfg.arch, pp);
    for (int s = 0; s < pp && !rc; s++)
        for (int r = 0; r < tp * engine_replicas(o) && !rc; r++) {
            plan p;
            plan_options po = engine_plan_options(m, o, tp, r % tp, r / tp, pp, s, first[s], first[s + 1]);
            if (plan_build(&p, m->tree, &po, err))
                rc = loom_err_prefix(err, "%s cannot run with -tp %d%s%s", m->cfg.arch, tp,
                                     o->sequence_parallel ? " and sequence parallelism" : "",
                                     o->expert_parallel ? " and expert parallelism" : "");
            else plan_free(&p);
        }
    free(first);
    return rc;
}

/* The recurrent state one sequence keeps on a rank of stage s, in each of the stage's recurrent
 * layers: the convolution's last kernel - 1 inputs and Gated DeltaNet's k_dim x v_dim matrix
 * per value head, or Mamba-2's head_dim x d_state per head, of this rank's share of the heads
 * (Mamba-2's B and C groups: a whole one where there are fewer than ranks). The executor
 * allocates what the plan says, which is this; the config gives it on every rank alike. */
static size_t seq_state_bytes(const loom_engine *e, int layer0, int layer1, int tp) {
    const model_config *c = &e->model->cfg;
    if (!c->recurrent) return 0;
    int layers = stage_count_using(e->model->tree, layer0, layer1, OP_CONV1D);
    size_t per;
    if (c->mamba.n_heads) {
        const mamba_config *mb = &c->mamba;
        size_t groups = mb->n_groups >= tp ? (size_t)mb->n_groups / tp : 1;
        per = (size_t)(mb->conv_kernel - 1) * (mb->inner / tp + 2 * groups * mb->d_state) +
              (size_t)mb->inner / tp * mb->d_state;
    } else {
        const gdn_config *g = &c->gdn;
        per = ((size_t)(g->conv_kernel - 1) * (2 * g->k_heads * g->k_dim + g->v_heads * g->v_dim) +
               (size_t)g->v_heads * g->k_dim * g->v_dim) /
              tp;
    }
    return layers * per * sizeof(float);
}

/* The KV pool: as many blocks as the budget holds on the stage with the most layers, so that
 * every rank counts the same blocks (rank 0 decides for all of them), and with a context asked
 * for, no more than max_seqs of them hold; and the context: as asked, or as long as the pool
 * (up to the model's maximum), a latent cache's smaller rows buying more of it. A hybrid
 * model's recurrent state for max_seqs sequences comes out of the budget first. */
static int size_kv(loom_engine *e, const loom_engine_options *o, loom_err *err) {
    size_t budget = o->kv_cache_bytes ? o->kv_cache_bytes : LOOM_KV_CACHE_BYTES_DEFAULT, state = 0;
    int bs = o->block_size ? o->block_size : LOOM_BLOCK_SIZE_DEFAULT, pp, layers = 0;
    if (bs < 16 || bs > 1024 || (bs & (bs - 1)))
        return loom_errf(err, "--block-size %d: a KV cache block holds a power of two from 16 to 1024 positions", bs);
    int *first = engine_stages(e->model, o, &pp, err);
    if (!first) return -1;
    for (int s = 0; s < pp; s++) { /* the layers with a KV cache (a hybrid model's attention ones) */
        int n = stage_count_using(e->model->tree, first[s], first[s + 1], OP_ATTENTION);
        size_t st = seq_state_bytes(e, first[s], first[s + 1], e->x.comm->size) * e->max_seqs;
        layers = n > layers ? n : layers;
        state = st > state ? st : state;
    }
    free(first);
    /* prefix caching keeps snapshots of it too */
    int slots = state && o->prefix_caching ? (o->state_snapshots ? o->state_snapshots : 2 * e->max_seqs) : 0;
    /* one block: the slots bound the memory, not the spacing; a hit then re-runs less than a
     * block, and a pass copies the state at most twice (DESIGN 3.16) */
    int interval = o->state_snapshot_interval ? o->state_snapshot_interval : bs;
    if (slots && (interval < bs || interval % bs))
        return loom_errf(err, "--state-snapshot-interval %d: a multiple of the block size (%d)", interval, bs);
    if (slots && slots < 2 * e->max_seqs)
        return loom_errf(err, "--state-snapshots %d: at least two a sequence (%d), which a pass may each take", slots,
                         2 * e->max_seqs);
    size_t whole = state / e->max_seqs * (e->max_seqs + (size_t)slots);
    if (whole >= budget)
        return loom_errf(err,
                         "the recurrent layers' state for %d sequences and %d snapshots (%zu bytes each on a rank) "
                         "fills the KV cache budget of %zu bytes: raise it (--kv-cache-memory-bytes), or run fewer "
                         "sequences (--max-num-seqs) or snapshots (--state-snapshots)",
                         e->max_seqs, slots, state ? state / e->max_seqs : 0, budget);
    budget -= whole;
    if (slots && state_cache_init(&e->sc, interval, slots, e->max_seqs, err)) return -1;
    e->x.n_snapshot_slots = slots;
    int max_pos = e->model->cfg.max_pos;
    /* a model without attention (Mamba-2) keeps its blocks for their bookkeeping alone: as many
     * as max_seqs whole contexts take */
    size_t per = engine_kv_bytes_per_token(e, layers),
           blocks = per ? budget / (per * bs)
                        : (size_t)e->max_seqs * (size_t)((o->max_ctx > 0 ? o->max_ctx : max_pos) + bs - 1) / bs;
    if (o->max_ctx > max_pos)
        return loom_errf(err, "max context %d exceeds the model's max_position_embeddings %d", o->max_ctx, max_pos);
    if (blocks > (size_t)1 << 30) blocks = (size_t)1 << 30;
    /* an explicit context bounds the pool too: max_seqs such contexts at once, so an engine asked
     * for short contexts does not take the whole budget (the prefix cache keeps what is free) */
    size_t most = (size_t)e->max_seqs * ((size_t)(o->max_ctx + bs - 1) / bs);
    if (o->max_ctx > 0 && blocks > most) blocks = most;
    if (!blocks)
        return loom_errf(err,
                         "the KV cache budget of %zu bytes on each rank holds not one block of %d positions (%zu "
                         "bytes a position): raise it (--kv-cache-memory-bytes)",
                         budget, bs, per);
    if ((size_t)o->max_ctx > blocks * bs)
        return loom_errf(err,
                         "a context of %d positions is over the KV cache budget of %zu bytes on each rank (%zu "
                         "blocks of %d, %zu bytes a position): shorten it (--max-model-len) or raise the budget "
                         "(--kv-cache-memory-bytes)",
                         o->max_ctx, budget, blocks, bs, per);
    e->max_ctx = o->max_ctx > 0 ? o->max_ctx : blocks * bs < (size_t)max_pos ? (int)(blocks * bs) : max_pos;
    /* longrope rotates all of a pass's rows by its long factors once the pass reaches past the
     * original context (executor.c, as transformers does), so a block's K would hold the
     * rotation of the pass that wrote it: another request attaching it would see other keys
     * than its own passes make. No prefix is exact then, and none is cached. */
    const model_config *c = &e->model->cfg;
    bool switches = c->rope_kind == ROPE_LONGROPE && e->max_ctx > c->rope_orig_max_pos;
    if (kv_cache_init(&e->kv, (int)blocks, bs, e->max_seqs, e->max_ctx, o->prefix_caching && !switches, err)) return -1;
    if (o->prefix_caching && switches)
        e->kv.uncached = "longrope switches a pass to its long factors past original_max_position_embeddings, so "
                         "a cached block's keys would depend on the pass that wrote them (a --max-model-len within "
                         "it keeps caching on)";
    return 0;
}

/* The plans: the one o asks for, and with --sp-min-tokens the plain TP one that short passes
 * (decode) run instead; weights are shared, the slices being the same. */
static int build_plans(loom_engine *e, const loom_engine_options *o, int pp, loom_err *err) {
    const loom_model *m = e->model;
    executor *x = &e->x;
    /* a progress line only where loading takes long enough to wonder (dummy or converted
     * weights of a large model; mapped f32/bf16 tensors load lazily) */
    loom_model_info info;
    loom_model_get_info(m, &info);
    bool progress = m->progress && info.n_params > (64u << 20);
    plan_options po =
        engine_plan_options(m, o, x->comm->size, x->comm->rank, e->replica, pp, x->stage, e->layer0, e->layer1);
    x->n_plans = 1;
    x->plans[0].max_tokens = e->max_tokens;
    if (plan_build(&x->plans[0].p, m->tree, &po, err) || bind_plan(&x->plans[0].p, &e->model->ws, progress, err))
        return -1;
    x->sp_min_tokens = x->plans[0].p.o.sp ? o->sp_min_tokens : 0;
    if (x->sp_min_tokens > 1) {
        plan_options tp_only = po;
        tp_only.sp = tp_only.async_tp = false;
        x->plans[1].max_tokens = x->sp_min_tokens - 1 < e->max_tokens ? x->sp_min_tokens - 1 : e->max_tokens;
        if (plan_build(&x->plans[1].p, m->tree, &tp_only, err) || bind_plan(&x->plans[1].p, &e->model->ws, false, err))
            return -1;
        x->n_plans = 2;
    }
    return 0;
}

/* The values kept after each pass (loom_engine_options' capture): which exist, and which
 * stage's first rank makes each, for the pipeline to send on. */
static int plan_captures(loom_engine *e, const loom_engine_options *o, loom_err *err) {
    executor *x = &e->x;
    int layers = stage_count_layers(e->model->tree), pp, *first = engine_stages(e->model, o, &pp, err);
    if (!first) return -1;
    int rc = 0;
    if (o->n_capture_layers < 0 || o->n_capture_layers > LOOM_MAX_CAPTURE_LAYERS)
        rc = loom_errf(err, "%d captured layers asked (up to %d)", o->n_capture_layers, LOOM_MAX_CAPTURE_LAYERS);
    for (int j = 0; j < o->n_capture_layers && !rc; j++) {
        int l = o->capture_layers[j];
        if (l < 0 || l >= layers)
            rc = loom_errf(err, "the hidden state entering layer %d is asked for, but %s has layers 0..%d", l,
                           e->model->cfg.arch, layers - 1);
        for (int s = 0; s < pp && !rc; s++)
            if (l >= first[s] && l < first[s + 1]) x->capture_root[j] = s * x->comm->size;
    }
    if (!rc && o->capture_last) x->capture_root[o->n_capture_layers] = (pp - 1) * x->comm->size;
    free(first);
    x->n_capture = o->n_capture_layers + o->capture_last;
    x->capture_width = stage_hidden_width(e->model->tree);
    x->capture_rows = e->max_tokens;
    return rc;
}

const float *engine_captured(const loom_engine *e, int slot, int *width) {
    *width = e->x.capture_width;
    return slot < e->x.n_capture ? e->x.capture[slot] : NULL;
}

/* What the executor runs on, and the engine's own per-sequence state and logits. */
static int alloc_state(loom_engine *e, loom_err *err) {
    const model_config *c = &e->model->cfg;
    executor *x = &e->x;
    x->max_tokens = e->max_tokens, x->max_logits = e->max_logits, x->max_ctx = e->max_ctx;
    x->layer0 = e->layer0, x->layer1 = e->layer1, x->max_seqs = e->max_seqs;
    x->kv_blocks = e->kv.n_blocks, x->block_size = e->kv.block_size, x->table_width = e->kv.table_width;
    x->kv_tables = e->kv.tables;
    x->image_token = c->vision.kind ? c->vision.image_token : -1;
    x->image_width = c->hidden;
    rope_freqs f;
    rope_freqs_of(c, &f);
    if (executor_init(x, &f, err)) return -1;
    size_t per = seq_state_bytes(e, e->layer0, e->layer1, x->comm->size); /* as size_kv counted it */
    if (x->state_bytes != per * (size_t)(e->max_seqs + x->n_snapshot_slots))
        return loom_errf(err,
                         "internal error: the plan keeps %zu bytes of recurrent state where the KV cache budget "
                         "counted %zu",
                         x->state_bytes, per * (size_t)(e->max_seqs + x->n_snapshot_slots));
    e->logits = mem_array((size_t)e->max_logits * c->head_vocab, sizeof *e->logits, "the logits", err);
    return e->logits ? 0 : -1;
}

/* The vision tower, sharded over this stage's ranks as the text model is, or whole on each
 * (asked, or where its heads or MLP features do not divide). */
static int load_vision(loom_engine *e, const loom_engine_options *o, loom_err *err) {
    const vision_config *v = &e->model->cfg.vision;
    int tp = e->x.comm->size;
    bool whole = o->mm_encoder_data || !vision_shards(v, tp);
    if (whole && !o->mm_encoder_data && e->x.comm->rank == 0 && e->layer0 == 0)
        fprintf(stderr,
                "loom: the vision tower runs whole on each of the %d ranks: its %d heads or %d MLP features do not "
                "divide by them\n",
                tp, v->n_heads, v->intermediate);
    if (!(e->vision = mem_zalloc(1, sizeof *e->vision, "the vision tower", err))) return -1;
    return vision_tower_load(e->vision, &e->model->cfg, &e->model->ws, whole ? 0 : e->x.comm->rank, whole ? 1 : tp,
                             err);
}

loom_engine *loom_engine_new(loom_model *m, const loom_engine_options *o, loom_err *err) {
    loom_engine *e = mem_zalloc(1, sizeof *e, "an engine", err);
    if (!e) return NULL;
    e->model = m;
    e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 1;
    engine_rows(o, &e->max_tokens, &e->max_logits);
    loom_comm *job = e->job = o->comm ? o->comm : (e->local_comm = comm_local());
    if (!job) {
        loom_errf(err, "cannot allocate a communicator for one rank");
        goto fail;
    }
    set_threads(o->threads, job->size);
    e->x.kv_dtype = o->kv_cache_dtype;
    if ((unsigned)o->kv_cache_dtype > LOOM_KV_INT8) {
        loom_errf(err, "kv_cache_dtype %d is none of loom_kv_dtype's", (int)o->kv_cache_dtype);
        goto fail;
    }
    int pp;
    /* with several replicas, a pass flows through the stages as one microbatch: the replicas'
     * experts meet in one all-to-all per layer and pass, whatever each replica's batch */
    int microbatches = engine_replicas(o) > 1 && o->expert_parallel ? 1 : o->pp_microbatches;
    if (join_groups(e, o, job, &pp, err) ||
        pipeline_init(&e->pl, pp, e->x.stage, microbatches, e->max_seqs, e->max_logits, err) ||
        plan_captures(e, o, err) || build_plans(e, o, pp, err) || size_kv(e, o, err))
        goto fail;
    if (m->cfg.vision.kind && load_vision(e, o, err)) goto fail;
    for (int i = 0; i < m->tree->n_ops; i++) e->reads_rows |= m->tree->ops[i].kind == OP_INPUT_ROWS;
    if (e->reads_rows && pp > 1) {
        loom_errf(err, "%s reads hidden states beside its ids and runs in one pipeline stage", m->cfg.arch);
        goto fail;
    }
    const plan *p = &e->x.plans[0].p;
    if (e->x.comm->rank == 0) { /* each stage's first rank, for its layers */
        warn_unused(m, p);
        for (int i = 0; i < p->n_warnings; i++) fprintf(stderr, "loom: warning: %s\n", p->warnings[i]);
    }
    if (alloc_state(e, err)) goto fail;
    /* data parallelism with a mixture of experts (on any stage): every replica runs every pass,
     * an empty one where it has nothing to run, so that the experts' collectives across
     * replicas pair up */
    e->lockstep = job->layout.dp > 1 && module_uses(m->tree, OP_MOE);
    if (e->lockstep) {
        int n = job->size;
        const char *what = "the replicas' token counts";
        if (!(e->counts = mem_array(n, sizeof *e->counts, what, err)) ||
            !(e->count_col0 = mem_array(n, sizeof *e->count_col0, what, err)) ||
            !(e->count_width = mem_array(n, sizeof *e->count_width, what, err)))
            goto fail;
        for (int r = 0; r < n; r++) e->count_col0[r] = r, e->count_width[r] = 1;
        e->x.ep.rank_tokens = e->counts;
    }
    return e;
fail:
    loom_engine_free(e);
    return NULL;
}

loom_engine *loom_engine_mirror_new(const loom_engine *like, loom_err *err) {
    loom_engine *e = mem_zalloc(1, sizeof *e, "an engine's mirror", err);
    if (!e) return NULL;
    *e = (loom_engine){.model = like->model,
                       .max_seqs = like->max_seqs,
                       .max_ctx = like->max_ctx,
                       .max_tokens = like->max_tokens,
                       .max_logits = like->max_logits,
                       .mirror = true};
    const kv_cache *kv = &like->kv;
    const state_cache *sc = &like->sc;
    if (!kv_cache_init(&e->kv, kv->n_blocks, kv->block_size, kv->max_seqs, like->max_ctx, kv->prefix_caching, err) &&
        !(sc->n_slots && state_cache_init(&e->sc, sc->interval, sc->n_slots, like->max_seqs, err)))
        return e;
    kv_cache_free(&e->kv);
    state_cache_free(&e->sc);
    free(e);
    return NULL;
}

void loom_engine_free(loom_engine *e) {
    if (!e) return;
    pipeline_free(&e->pl);
    executor_free(&e->x);
    kv_cache_free(&e->kv);
    state_cache_free(&e->sc);
    free(e->logits);
    if (e->vision) vision_tower_free(e->vision);
    free(e->vision);
    free(e->counts), free(e->count_col0), free(e->count_width);
    comm_free(e->ep_comm);
    comm_free(e->own_comm);
    comm_free(e->replica_comm);
    comm_free(e->local_comm);
    free(e);
}

void loom_engine_reset_seq(loom_engine *e, int seq) {
    if (seq >= 0 && seq < e->max_seqs) kv_cache_release(&e->kv, seq);
}

void loom_engine_get_kv_stats(const loom_engine *e, loom_kv_stats *st) {
    kv_cache_get_stats(&e->kv, st);
    st->dtype = e->x.kv_dtype;
}

unsigned long long loom_engine_kv_digest(const loom_engine *e) { return kv_cache_digest(&e->kv); }

int loom_engine_match_prefix(const loom_engine *e, const int32_t *tokens, int n, int32_t *blocks) {
    int m = kv_cache_match(&e->kv, tokens, n, blocks);
    return e->sc.n_slots ? state_cache_resumable(&e->sc, &e->kv, blocks, m) : m; /* where a snapshot follows */
}

int loom_engine_attach_prefix(loom_engine *e, int seq, const int32_t *blocks, int n, loom_err *err) {
    if (kv_cache_attach(&e->kv, seq, blocks, n, err)) return -1;
    if (!e->sc.n_slots || !n) return 0;
    int slot = state_cache_take(&e->sc, &e->kv, blocks[n - 1]); /* every recurrent layer's state resumes there */
    if (slot < 0) {
        kv_cache_release(&e->kv, seq);
        return loom_errf(err,
                         "a cached prefix of %d blocks attached to sequence %d ends where no snapshot of the "
                         "recurrent layers' state is kept (loom_engine_match_prefix gives the prefixes that can "
                         "resume)",
                         n, seq);
    }
    if (!e->mirror) executor_restore_state(&e->x, seq, slot);
    return 0;
}

int loom_engine_truncate_seq(loom_engine *e, int seq, int len, loom_err *err) {
    if (seq < 0 || seq >= e->max_seqs)
        return loom_errf(err, "sequence %d cut back, but the engine holds %d", seq, e->max_seqs);
    if (e->model->cfg.recurrent && len < e->kv.len[seq])
        return loom_errf(err,
                         "sequence %d cut back to %d positions: %s has recurrent layers, whose state cannot be "
                         "rewound",
                         seq, len, e->model->cfg.arch);
    return kv_cache_truncate(&e->kv, seq, len, err);
}

/* Before a lockstep pass: every rank learns every rank's token count (e->counts), which must be
 * the same across a replica; e->busy counts the replicas with tokens. */
static int agree_counts(loom_engine *e, int n_tokens, loom_err *err) {
    loom_comm *job = e->job;
    float mine = (float)n_tokens;
    loom_comm_set_phase(job, "agreeing on the replicas' token counts");
    if (comm_all_gather_cols(job, &mine, 1, e->counts, job->size, 1, e->count_col0, e->count_width, err)) return -1;
    e->busy = 0;
    int tp = job->layout.tp, dp = job->layout.dp;
    for (int d = 0; d < dp; d++) e->busy += e->counts[d * tp] > 0;
    for (int w = 0; w < job->size; w++) {
        int first = comm_group_member(&job->layout, GROUP_REPLICA, comm_replica_of(&job->layout, w), 0);
        if (e->counts[w] != e->counts[first]) {
            char a[32], b[32];
            return loom_errf(err, "rank %s runs a pass of %.0f tokens where rank %s of its replica runs %.0f",
                             comm_format_rank(w, &job->layout, a, sizeof a), e->counts[w],
                             comm_format_rank(first, &job->layout, b, sizeof b), e->counts[first]);
        }
    }
    return 0;
}

int loom_engine_wait_replicas(loom_engine *e, loom_err *err) {
    if (!e->lockstep) return 0;
    do {
        if (agree_counts(e, 0, err) || (e->busy && executor_run_idle(&e->x, err))) return -1;
    } while (e->busy);
    return 0;
}

/* A vision-language model's image tokens, where the batch has image rows for them: in runs of
 * whole images, since an image's tokens see each other (a run cut by the batch's edge would not
 * see the rest). Without rows they are plain tokens. */
static int check_images(const loom_engine *e, const loom_batch *b, loom_err *err) {
    const vision_config *v = &e->model->cfg.vision;
    if (!v->kind || !b->image_rows) return 0;
    for (int i = 0; i < b->n_tokens;) {
        if (b->ids[i] != v->image_token) {
            i++;
            continue;
        }
        int e0 = i;
        while (i < b->n_tokens && b->ids[i] == v->image_token && b->seq[i] == b->seq[e0]) i++;
        if ((i - e0) % v->tokens_per_image)
            return loom_errf(err,
                             "tokens %d-%d: %d image tokens, not whole images of %d (an image's tokens must all be "
                             "in one batch)",
                             e0, i - 1, i - e0, v->tokens_per_image);
    }
    return 0;
}

/* Rejects a batch the kernels could not run correctly, before anything is written. */
static int check_batch(const loom_engine *e, const loom_batch *b, loom_err *err) {
    if (b->n_tokens == 0) return b->n_logits ? loom_errf(err, "%d logit rows asked of an empty batch", b->n_logits) : 0;
    if (b->n_tokens < 0 || b->n_tokens > e->max_tokens)
        return loom_errf(err, "batch of %d tokens (engine holds up to %d)", b->n_tokens, e->max_tokens);
    if (e->reads_rows && !e->x.rows_in)
        return loom_errf(err, "%s reads a hidden state beside each token id: it runs as a speculative draft",
                         e->model->cfg.arch);
    if (b->n_logits < 0 || b->n_logits > e->max_logits)
        return loom_errf(err, "%d logit rows asked (engine holds up to %d)", b->n_logits, e->max_logits);
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i];
        if (b->ids[i] < 0 || b->ids[i] >= e->model->cfg.vocab)
            return loom_errf(err, "token %d: id %d outside the vocabulary (%d)", i, b->ids[i], e->model->cfg.vocab);
        if (s < 0 || s >= e->max_seqs)
            return loom_errf(err, "token %d: sequence %d (engine holds %d)", i, s, e->max_seqs);
        if (b->pos[i] < 0 || b->pos[i] >= e->max_ctx)
            return loom_errf(err, "token %d: position %d beyond the context of %d", i, b->pos[i], e->max_ctx);
        bool starts_run = i == 0 || b->seq[i - 1] != s;
        int expect = starts_run ? e->kv.len[s] : b->pos[i - 1] + 1;
        if (b->pos[i] != expect)
            return loom_errf(err, "token %d: sequence %d continues at position %d, not %d", i, s, expect, b->pos[i]);
        for (int j = 0; starts_run && j < i; j++)
            if (b->seq[j] == s) return loom_errf(err, "token %d: sequence %d's tokens are not contiguous", i, s);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return loom_errf(err, "logit row %d: %d is not a token of the batch", i, b->logit_rows[i]);
    if (check_images(e, b, err)) return -1;
    int need = kv_cache_batch_needs(&e->kv, b);
    if (need > e->kv.n_free)
        return loom_errf(err,
                         "the KV cache is full: the batch needs %d more blocks of %d positions and %d of the %d "
                         "are free",
                         need, e->kv.block_size, e->kv.n_free, e->kv.n_blocks);
    return 0;
}

int loom_encode_image(loom_engine *e, const float *pixels, float *features, loom_err *err) {
    const vision_config *v = &e->model->cfg.vision;
    if (!e->vision) return loom_errf(err, "%s takes no images", e->model->cfg.arch);
    if (e->mirror) return loom_errf(err, "an engine's mirror runs nothing");
    if (e->layer0 > 0) { /* a later pipeline stage: its layers never read the rows */
        memset(features, 0, (size_t)v->tokens_per_image * e->model->cfg.hidden * sizeof *features);
        return 0;
    }
    return vision_encode(e->vision, e->x.comm, pixels, features, err);
}

int engine_forward_rows(loom_engine *e, const loom_batch *b, const float *rows_in, const float **logits,
                        loom_err *err) {
    e->x.rows_in = rows_in;
    int rc = loom_forward(e, b, logits, err);
    e->x.rows_in = NULL;
    return rc;
}

int loom_forward(loom_engine *e, const loom_batch *b, const float **logits, loom_err *err) {
    if (check_batch(e, b, err)) return -1;
    *logits = e->logits;
    if (e->mirror) { /* what the engine it mirrors does to its blocks, and nothing more */
        kv_cache_grow_batch(&e->kv, b);
        if (e->sc.n_slots) state_cache_plan(&e->sc, &e->kv, b);
        kv_cache_written_batch(&e->kv, b);
        if (e->sc.n_slots) state_cache_commit(&e->sc, &e->kv);
        return 0;
    }
    if (e->lockstep && agree_counts(e, b->n_tokens, err)) return -1;
    if (!b->n_tokens) return e->lockstep && e->busy ? executor_run_idle(&e->x, err) : 0;
    kv_cache_grow_batch(&e->kv, b); /* the blocks the kernels write are in the tables before the pass */
    if (e->sc.n_slots) {            /* the recurrent state's snapshots this pass takes */
        state_cache_plan(&e->sc, &e->kv, b);
        e->x.snaps = (state_snapshots){e->sc.n_pass, e->sc.interval, e->sc.pass, NULL};
    }
    size_t vocab = e->model->cfg.head_vocab;
    if (e->pl.pp > 1) {
        if (pipeline_forward(&e->pl, &e->x, b, e->logits, vocab, err)) return -1;
    } else {
        if (executor_run_pass(&e->x, b, err)) return -1;
        executor_take_logits(&e->x, b, e->logits, vocab, NULL);
    }
    kv_cache_written_batch(&e->kv, b); /* each sequence's run of tokens, now in its blocks */
    if (e->sc.n_slots) state_cache_commit(&e->sc, &e->kv);
    return e->after_pass ? e->after_pass(e->after_pass_user, b, err) : 0;
}
