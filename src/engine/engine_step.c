/* engine_step.c — the step thread's work: turning requests into sequences,
 * executing one scheduler plan through the runner, and turning each logits
 * row into a sampled token, stop checks and an event. Runs only on the step
 * thread, so nothing here locks; engine.c owns the thread and the API.
 *
 * Pipeline (one engine_step, overlapped scheduling): while pass N runs on
 * the compute thread, step N+1 is planned (sched_schedule_ahead): launching
 * N advanced each sequence's n_computed past N's tokens and appended a
 * placeholder for the token N samples, so N's sequences continue (their
 * blocks for the next token reserved now), and new requests are admitted.
 * When N ends: sample its logits rows into the placeholders (the only work
 * between two passes besides preparing the next; a token that ends its
 * branch — EOS, a stop id, the length — drops it from plan N+1) -> launch
 * N+1 -> then, while N+1 runs, N's bookkeeping: commits (prefix cache, KV
 * store) and the events of its tokens (detokenization, stop strings,
 * callbacks). A plan that would have to preempt is not made ahead: the
 * engine then finishes N first and plans after it, as without overlap
 * (engine_opts.no_overlap: always). Sequences in the running pass are marked
 * in_flight: planning never preempts them or touches their rings, the pass
 * reads its own copy of their block tables, and a branch that ends meanwhile
 * (stop string, cancel) has its final event sent at once and is freed when
 * the pass ends (draining; the token computed for it is discarded).

 * n > 1: the request starts as one sequence; when its prompt is done, the
 * n - 1 other branches fork from it (sharing every prompt block) and each
 * branch samples its first token from the same logits row with its own
 * generator. Sliding-window models fork their rings by snapshot/restore; a
 * runner without snapshots runs the n branches as independent sequences.
 *
 * Sliding-window state (runners with swa_save/swa_restore): a sequence that
 * stands exactly at a hashed block boundary after a step (the scheduler cuts
 * prefill chunks there, decodes cross every boundary) leaves a snapshot of
 * its rings in the SWA cache under that block's chain key — so the state of
 * the last boundary before a sequence ends is always there when it ends. A
 * sequence admitted with a prefix hit of H tokens restores the snapshot of
 * block H/128 - 1, or, when it is missing, rebuilds the rings by replaying
 * tokens [H - R, H) (R = min(replay_tokens, H)) in a forward pass of their
 * own before the step: the sliding-window layers see nothing below H - R
 * (swa_floor), and the full-attention layers read the cached KV and do not
 * write it (kv_keep_end = H), so shared cached blocks never change and the
 * replayed tokens' full-layer outputs are those of the cached context. With
 * R = window x SWA depth this is exactly the no-cache state. A hit served by
 * the persistent KV store (engine_opts.kv_store) takes the same path: the
 * store holds full-attention blocks only, so the rings are replayed unless
 * the SWA cache still has their snapshot.
 *
 * KV store: after a step's commit, the blocks it newly hashed (full blocks,
 * prompt or output) are queued for the store under the request's traffic
 * class (kvs_persist_new copies them; the writer threads do the I/O). A
 * sequence admitted with a store hit (seq.store_load, fetched while others
 * ran) has its later layers swapped in during its first pass: the forward
 * waits for each layer through mseq.kv_wait, and the pass's end registers
 * the loaded blocks in the prefix cache (kvs_load_finish). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"

/* --- sequence lifecycle --------------------------------------------------- */
static void seq_setup(engine *e, ereq *r, seq *q, int branch) {
    q->owner = r;
    q->branch = branch;
    q->rng = samp_rng_init(r->r.sampling.seed, branch);
    q->detok = e->has_detok ? e->detok.open(e->detok.ctx) : NULL;
    q->json_on = r->r.json && !r->r.json_wait;
    q->json_wait = r->r.json && r->r.json_wait;
    q->plp_sent = false;
    q->scored = r->r.prompt_logprobs;
    if (r->r.json) {
        if (!e->jv) { /* once per engine: every token's bytes, sorted */
            e->jv = jg_vocab_new(e->run.vocab, e->detok.token_bytes, e->detok.ctx, e->run.eos_ids,
                                 e->run.n_eos);
            if (e->detok.control_bytes)
                jg_vocab_add_controls(e->jv, e->detok.control_bytes, e->detok.ctx);
        }
        if (r->grammar) /* the branch's own matcher, freed with it */
            jg_init_grammar(&q->json, gr_matcher_new(r->grammar));
        else if (r->regex)
            jg_init_regex(&q->json, r->regex);
        else if (r->calls)
            jg_init_calls(&q->json, r->calls);
        else
            jg_init_schema(&q->json, r->schema);
    }
    e->run.seq_init(e->run.ctx, &q->mseq);
    r->seqs[branch] = q;
    r->n_live++;
    if (branch >= r->n_seqs) r->n_seqs = branch + 1;
}

void engine_seq_model_free(engine *e, seq *q) {
    q->mseq.blocks = NULL;
    q->mseq.n_blocks = q->mseq.cap_blocks = 0;
    e->run.seq_free(e->run.ctx, &q->mseq);
    memset(&q->mseq, 0, sizeof q->mseq);
}

void engine_ingest(engine *e, ereq *r) {
    bool independent = e->run.has_swa && !e->swa;
    int n_initial = independent ? r->r.n : 1;
    for (int b = 0; b < n_initial; b++) {
        seq *q = seq_new(e->next_seq_id++, r->prompt, r->r.n_prompt, r->r.priority, r->id);
        seq_setup(e, r, q, b);
        sched_add_waiting(e->sched, q);
    }
    if (independent || r->r.n == 1) r->forked = true; /* nothing left to fork */
    r->next = e->active;
    e->active = r;
    e->st.prompt_tokens += r->r.n_prompt;
    e->st.traffic_requests[r->r.traffic]++;
}

void engine_free_req(ereq *r) {
    free(r->prompt);
    free(r->bias);
    free(r->allowed);
    free(r->bad);
    free(r->stop_ids);
    free(r->ends);
    for (int i = 0; i < r->r.stop.n_strs; i++) free(r->stop_strs[i]);
    free(r->stop_strs);
    jg_schema_free(r->schema);
    jr_free(r->regex);
    gr_free(r->grammar);
    jg_calls_free(r->calls);
    free(r->plp);
    free(r);
}

static void text_reserve(engine *e, size_t n) {
    if (n + 1 <= e->cap_text) return;
    e->cap_text = (n + 1) * 2;
    e->text = di_realloc(e->text, e->cap_text);
}

static void emit(engine *e, ereq *r, seq *q, int token, const char *text, size_t len,
                 const samp_out *so, engine_finish fin, const char *error) {
    engine_event ev = {
        .req_id = r->id,
        .index = q->branch,
        .token = token,
        .text = text ? text : "",
        .text_len = text ? len : 0,
        .finish = fin,
        .error = error,
    };
    if (so && (r->r.sampling.logprobs || r->r.sampling.top_logprobs > 0)) {
        ev.has_logprobs = true;
        ev.logprob = so->logprob;
        ev.top = so->top;
        ev.n_top = so->n_top;
    }
    if (r->plp && !q->plp_sent && fin != ENGINE_FINISH_ERROR && fin != ENGINE_FINISH_CANCELLED) {
        q->plp_sent = true;
        ev.prompt_lp = r->plp;
        ev.n_prompt_lp = r->r.n_prompt;
    }
    if (fin != ENGINE_FINISH_NONE)
        ev.usage =
            (engine_usage){r->r.n_prompt, r->r.prompt_only ? 0 : seq_generated(q), q->n_cached};
    if (r->r.on_event) r->r.on_event(&ev, r->r.user);
}

static void unlink_req(engine *e, ereq *r) {
    for (ereq **pp = &e->active; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

/* Removes a finished branch; frees the request with its last branch. */
static void finish_seq(engine *e, seq *q) {
    ereq *r = q->owner;
    sched_remove(e->sched, q);
    engine_seq_model_free(e, q);
    if (q->detok) e->detok.close(q->detok);
    q->detok = NULL;
    r->seqs[q->branch] = NULL;
    seq_free(q);
    if (--r->n_live > 0 || !r->forked) return;
    unlink_req(e, r);
    e->st.requests_done++;
    engine_free_req(r);
}

/* Branches 1..n-1 of a request that ends before its fork still get their
 * final event, so every branch of every request ends exactly once. */
static void end_unforked(engine *e, ereq *r, engine_finish why, const char *error) {
    if (r->forked) return;
    r->forked = true;
    for (int b = 1; b < r->r.n; b++) {
        engine_event ev = {.req_id = r->id,
                           .index = b,
                           .token = -1,
                           .text = "",
                           .finish = why,
                           .usage = {r->r.n_prompt, 0, 0},
                           .error = error};
        if (r->r.on_event) r->r.on_event(&ev, r->r.user);
    }
}

static ereq *find_active(engine *e, uint64_t id) {
    for (ereq *r = e->active; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

/* A branch whose final event has been delivered: freed now, or, while the
 * pass in flight still uses its memory, when that pass ends. */
static void end_seq(engine *e, seq *q) {
    if (q->in_flight)
        q->draining = true;
    else
        finish_seq(e, q);
}

void engine_cancel_now(engine *e, uint64_t id, engine_finish why, const char *error) {
    ereq *r = find_active(e, id);
    if (!r) return;
    seq *qs[ENGINE_MAX_N];
    int n = 0;
    for (int b = 0; b < r->n_seqs; b++)
        if (r->seqs[b] && !r->seqs[b]->draining) qs[n++] = r->seqs[b];
    if (n == 0 && r->n_live > 0) return; /* every branch has ended already */
    end_unforked(e, r, why, error);
    if (why == ENGINE_FINISH_CANCELLED) e->st.requests_cancelled++;
    for (int i = 0; i < e->n_pend; i++) /* their sampled tokens are not delivered */
        for (int k = 0; k < n; k++)
            if (e->pend[i].q == qs[k]) e->pend[i].q = NULL;
    if (n == 0) { /* had no live branch (cannot happen; keeps the list finite) */
        unlink_req(e, r);
        engine_free_req(r);
        return;
    }
    for (int k = 0; k < n; k++) emit(e, r, qs[k], -1, NULL, 0, NULL, why, error);
    for (int k = 0; k < n; k++) end_seq(e, qs[k]); /* the last may free r */
}

/* --- tokens --------------------------------------------------------------- */
/* The event of a sampled token: detokenization, stop strings, length, then
 * the callback; ends the branch when it finishes. The token-level reasons
 * (EOS, a stop id, the length) were found when it was sampled. */
static void deliver(engine *e, const pending_ev *pe) {
    seq *q = pe->q;
    ereq *r = q->owner;
    const stop_params *sp = &r->r.stop;
    stop_reason why = pe->why;
    const char *t = NULL;
    size_t tl = 0, used = 0;
    if (r->r.prompt_only) { /* no token: the branch ends here */
        emit(e, r, q, -1, NULL, 0, NULL, ENGINE_FINISH_LENGTH, NULL);
        end_seq(e, q);
        return;
    }
    if (why == STOP_NONE && q->detok) {
        size_t pl = 0;
        const char *piece = e->detok.push(q->detok, pe->so.token, &pl);
        why = stop_feed(&q->stop, sp, piece, pl, &t, &tl);
        text_reserve(e, tl);
        memcpy(e->text, t, tl);
        used = tl;
    }
    if (why == STOP_NONE && pe->length) why = STOP_LENGTH;
    if (why == STOP_EOS || why == STOP_LENGTH) { /* release everything held back */
        stop_flush(&q->stop, &t, &tl);
        text_reserve(e, used + tl);
        memcpy(e->text + used, t, tl);
        used += tl;
        if (q->detok) {
            t = e->detok.flush(q->detok, &tl);
            text_reserve(e, used + tl);
            memcpy(e->text + used, t, tl);
            used += tl;
        }
    }
    if (e->text) e->text[used] = 0;
    engine_finish fin = why == STOP_NONE     ? ENGINE_FINISH_NONE
                        : why == STOP_LENGTH ? ENGINE_FINISH_LENGTH
                                             : ENGINE_FINISH_STOP;
    emit(e, r, q, pe->so.token, e->text, used, &pe->so, fin, NULL);
    if (fin != ENGINE_FINISH_NONE) end_seq(e, q);
}

/* Samples q's next token into its placeholder and queues its event, which
 * is delivered while the next pass runs (a stop string found then ends the
 * branch after that pass, one token of work wasted). A token that ends the
 * branch by itself (EOS, a stop id, the length) takes it out of the plan
 * made ahead, if any. Returns whether it ends the branch. */
static bool on_token(engine *e, seq *q, const float *row, const samp_out *drawn,
                     bool planned_ahead) {
    ereq *r = q->owner;
    if (!q->ahead) seq_append_ahead(q);
    if (e->n_pend == e->cap_pend) {
        e->cap_pend = e->cap_pend ? 2 * e->cap_pend : 16;
        e->pend = di_realloc(e->pend, sizeof *e->pend * (size_t)e->cap_pend);
    }
    pending_ev *pe = &e->pend[e->n_pend++];
    pe->q = q;
    if (r->r.prompt_only) { /* nothing drawn; the placeholder is never run */
        pe->so = (samp_out){.token = -1};
        pe->why = STOP_NONE;
        pe->length = true;
        if (planned_ahead) sched_plan_drop(e->sched, q);
        return true;
    }
    if (drawn)
        pe->so = *drawn;
    else
        samp_next(e->samp, &r->r.sampling, &q->rng, row, q->tokens, q->n_prompt, q->n_tokens - 1,
                  e->jv, q->json_on ? &q->json : NULL, &pe->so);
    if (q->json_on && !jg_feed_token(e->jv, &q->json, pe->so.token))
        q->json_on = false; /* a token the mask did not allow (none should be) */
    else if (q->json_wait && pe->so.token == r->r.json_wait_for)
        q->json_wait = false, q->json_on = true;
    seq_fill_ahead(q, pe->so.token);
    e->st.generated_tokens++;
    const stop_params *sp = &r->r.stop;
    pe->q = q;
    pe->why = stop_check_token(sp, e->run.eos_ids, e->run.n_eos, pe->so.token);
    pe->length =
        (sp->max_tokens > 0 && seq_generated(q) >= sp->max_tokens) || q->n_tokens >= e->seq_cap;
    bool ends = pe->why != STOP_NONE || pe->length;
    if (ends && planned_ahead) sched_plan_drop(e->sched, q);
    return ends;
}

static void deliver_pending(engine *e) {
    for (int i = 0; i < e->n_pend; i++)
        if (e->pend[i].q) deliver(e, &e->pend[i]);
    e->n_pend = 0;
}

/* The prompt is done: fork the other branches off q, then sample them all.
 * With a plan made ahead, the new branches that go on join it. */
static void fork_and_sample(engine *e, seq *q, const float *row, bool planned_ahead) {
    ereq *r = q->owner;
    r->forked = true;
    seq *branch[ENGINE_MAX_N];
    branch[0] = q;
    model_swa_state *rings = e->swa ? e->run.swa_save(e->run.ctx, &q->mseq) : NULL;
    for (int b = 1; b < r->r.n; b++) {
        seq *c = seq_clone(q, e->next_seq_id++);
        seq_setup(e, r, c, b);
        bm_fork(e->bm, &q->table, &c->table);
        if (rings) e->run.swa_restore(e->run.ctx, &c->mseq, rings);
        c->mseq.n_past = q->mseq.n_past;
        sched_add_running(e->sched, c);
        branch[b] = c;
    }
    if (rings) e->run.swa_free(rings);
    int n = r->r.n;
    for (int b = 0; b < n; b++) {
        bool ends = on_token(e, branch[b], row, NULL, planned_ahead);
        if (b > 0 && !ends && planned_ahead) sched_plan_add(e->sched, branch[b]);
    }
}

static void fail_seq(engine *e, seq *q, const char *msg) {
    ereq *r = q->owner;
    for (int i = 0; i < e->n_pend; i++)
        if (e->pend[i].q == q) e->pend[i].q = NULL;
    emit(e, r, q, -1, NULL, 0, NULL, ENGINE_FINISH_ERROR, msg);
    end_unforked(e, r, ENGINE_FINISH_ERROR, msg);
    finish_seq(e, q);
}

/* --- sliding-window state --------------------------------------------------- */
/* q was admitted with a prefix hit of q->n_computed tokens and its rings are
 * empty: restore them from the SWA cache, or queue a replay. */
static void swa_rebuild(engine *e, seq *q, int *n_replay) {
    int H = q->n_computed;
    const model_swa_state *st =
        q->table.n_hashed * BM_BLOCK == H ? swc_get(e->swa_cache, q->table.last_key) : NULL;
    if (st && model_swa_state_pos(st) == H) {
        e->run.swa_restore(e->run.ctx, &q->mseq, st);
        e->st.swa_restores++;
        return;
    }
    int R = e->replay_tokens < H ? e->replay_tokens : H;
    q->mseq.n_past = H - R;
    q->mseq.swa_floor = H - R;
    q->mseq.kv_keep_end = H;
    if (*n_replay == e->cap_replay) {
        e->cap_replay = e->cap_replay ? 2 * e->cap_replay : 8;
        e->replay = di_realloc(e->replay, sizeof *e->replay * (size_t)e->cap_replay);
        e->replay_seq = di_realloc(e->replay_seq, sizeof(seq *) * (size_t)e->cap_replay);
    }
    e->replay_seq[*n_replay] = q;
    e->replay[(*n_replay)++] = (model_batch_seq){&q->mseq, q->tokens + H - R, R, NULL, false, NULL};
    e->st.swa_replays++;
    e->st.swa_replayed_tokens += R;
}

/* A sequence whose rings stand at H tokens (at a hashed block boundary)
 * leaves them in the cache under that block's key (once per key). */
static void swa_snapshot(engine *e, seq *q, int H) {
    if (H == 0 || H % BM_BLOCK || q->table.n_hashed * BM_BLOCK != H) return;
    if (swc_has(e->swa_cache, q->table.last_key)) return;
    model_swa_state *st = e->run.swa_save(e->run.ctx, &q->mseq);
    if (st) swc_put(e->swa_cache, q->table.last_key, st, e->run.swa_bytes(st));
}

/* --- the pass that ended ------------------------------------------------------ */
/* Registers the blocks an ended pass filled in the prefix cache, queues them
 * for the KV store, and snapshots rings standing at a block boundary (which
 * must happen before the sequence's next pass moves them). */
static void commit_item(engine *e, pass_item *it) {
    seq *q = it->q;
    if (!q || it->committed) return;
    it->committed = true;
    int hashed = q->table.n_hashed;
    bm_commit(e->bm, &q->table, q->tokens, it->end);
    if (e->store && q->table.n_hashed > hashed) {
        engine_traffic t = ((ereq *)q->owner)->r.traffic;
        kvs_persist_new(e->store, &q->table, hashed, q->tokens,
                        t == ENGINE_TRAFFIC_AGENT ? KVS_CLASS_AGENT : KVS_CLASS_CHAT, &e->store_io);
    }
    if (e->swa) swa_snapshot(e, q, it->end);
}

/* Whether sample_pass, after a pass that ran, draws item it's token through
 * on_token (not a sequence being drained, nor an n > 1 request's first). */
static bool draws_plainly(const pass_item *it) {
    if (!it->logits || it->q->draining) return false;
    const ereq *r = it->q->owner;
    return (r->forked || r->r.n <= 1) && !r->r.prompt_only;
}

/* Scratch for `tasks` sampling tasks on the backend's pool. */
static void reserve_tasks(engine *e, int tasks) {
    if (e->n_samp_task >= tasks) return;
    e->samp_task = di_realloc(e->samp_task, sizeof(samp_ctx *) * (size_t)tasks);
    while (e->n_samp_task < tasks) e->samp_task[e->n_samp_task++] = samp_ctx_new(e->run.vocab);
}

typedef struct draw_job {
    engine *e;
    const int *items; /* indices into e->done */
    int n;
} draw_job;

static void draw_task(void *ctx, int task, int n_tasks) {
    draw_job *j = ctx;
    engine *e = j->e;
    int lo = (int)((long)j->n * task / n_tasks), hi = (int)((long)j->n * (task + 1) / n_tasks);
    for (int k = lo; k < hi; k++) {
        int i = j->items[k];
        const pass_item *it = &e->done.v[i];
        seq *q = it->q;
        const ereq *r = q->owner;
        int n_tokens = q->ahead ? q->n_tokens - 1 : q->n_tokens; /* as on_token passes */
        samp_next(e->samp_task[task], &r->r.sampling, &q->rng, it->logits, q->tokens, q->n_prompt,
                  n_tokens, e->jv, q->json_on ? &q->json : NULL, &e->drawn[i]);
    }
}

/* Draws the pass's plain rows on the backend's pool (idle between passes)
 * and returns them by pass index (token -1: not drawn), or NULL (no pool,
 * few rows). Each draw reads only its own sequence, so on_token then takes
 * exactly what it would have drawn itself. With 64 rows of a 128k
 * vocabulary a step's sampling is milliseconds to tens of them (top-p), all
 * of it the compute threads' idle time. */
static const samp_out *draw_rows(engine *e, bool ok) {
    pass_rec *d = &e->done;
    pool *p = e->run.pool;
    int threads = p ? pool_threads(p) : 1;
    if (threads < 2 || !ok || d->n < 4) return NULL;
    int *items = di_malloc(sizeof(int) * (size_t)d->n), n = 0;
    for (int i = 0; i < d->n; i++)
        if (draws_plainly(&d->v[i])) items[n++] = i;
    const samp_out *drawn = NULL;
    if (n >= 4) {
        if (e->cap_drawn < d->n) {
            e->cap_drawn = 2 * d->n;
            free(e->drawn);
            e->drawn = di_malloc(sizeof(samp_out) * (size_t)e->cap_drawn);
        }
        int tasks = n < threads ? n : threads;
        reserve_tasks(e, tasks);
        for (int i = 0; i < d->n; i++) e->drawn[i].token = -1; /* not drawn here */
        draw_job j = {e, items, n};
        pool_run(p, draw_task, &j, tasks);
        drawn = e->drawn;
    }
    free(items);
    return drawn;
}

typedef struct score_job {
    engine *e;
    const pass_item *it;
    int n; /* rows with a prompt token after them */
} score_job;

static void score_task(void *ctx, int task, int n_tasks) {
    const score_job *j = ctx;
    const pass_item *it = j->it;
    ereq *r = it->q->owner;
    int start = it->end - it->n_tokens, V = j->e->run.vocab;
    samp_ctx *c = n_tasks > 1 ? j->e->samp_task[task] : j->e->samp;
    for (int k = (int)((long)j->n * task / n_tasks); k < (int)((long)j->n * (task + 1) / n_tasks);
         k++)
        samp_score(c, it->rows + (size_t)k * (size_t)V, it->q->tokens[start + k + 1],
                   r->r.prompt_top, &r->plp[start + k + 1]);
}

/* A chunk of a prompt being scored: each row's logprob of the prompt token
 * that follows it (entries up to the prompt's last token; later rows, of a
 * sequence recomputed after a preemption, are not needed), on the backend's
 * pool (idle between passes): a row is a pass over the vocabulary. */
static void score_prompt(engine *e, const pass_item *it) {
    const ereq *r = it->q->owner;
    int left = r->r.n_prompt - 1 - (it->end - it->n_tokens);
    score_job j = {e, it, it->n_tokens < left ? it->n_tokens : left};
    pool *p = e->run.pool;
    int tasks = p ? pool_threads(p) : 1;
    if (tasks > j.n) tasks = j.n;
    if (tasks < 2) {
        score_task(&j, 0, 1);
        return;
    }
    reserve_tasks(e, tasks);
    pool_run(p, score_task, &j, tasks);
}

/* The pass has ended: its sequences are the step thread's again. Frees the
 * branches that ended meanwhile and samples every logits row (the only work
 * between two passes besides preparing the next). */
static void sample_pass(engine *e, bool ok, bool planned_ahead) {
    pass_rec *d = &e->done;
    for (int i = 0; i < d->n; i++) d->v[i].q->in_flight = false;
    const samp_out *drawn = draw_rows(e, ok);
    for (int i = 0; i < d->n; i++) {
        pass_item *it = &d->v[i];
        seq *q = it->q;
        if (q->draining) {
            e->st.discarded_tokens += it->n_tokens;
            finish_seq(e, q);
            it->q = NULL;
            continue;
        }
        if (ok && q->store_load) { /* its store blocks are all in: into the prefix cache */
            kvs_load_finish(q->store_load, e->bm, &q->table, q->tokens);
            q->store_load = NULL;
            q->mseq.kv_wait = NULL;
        }
        if (ok && it->rows) score_prompt(e, it);
        if (!ok || !it->logits) continue;
        ereq *r = q->owner;
        if (!r->forked && r->r.n > 1) {
            commit_item(e, it); /* the branches share the committed blocks */
            fork_and_sample(e, q, it->logits, planned_ahead);
        } else {
            on_token(e, q, it->logits, drawn && drawn[i].token >= 0 ? &drawn[i] : NULL,
                     planned_ahead);
        }
    }
    if (!ok) d->n = 0;
}

/* The rest of the ended pass's work: commits, then the sampled tokens'
 * events (which may end and free branches). */
static void finish_pass(engine *e) {
    for (int i = 0; i < e->done.n; i++) commit_item(e, &e->done.v[i]);
    e->done.n = 0;
    deliver_pending(e);
}

static int wait_pass(engine *e, bool planned_ahead, di_err *err) {
    if (e->fl.n == 0) return 0;
    double secs = 0;
    int rc = engine_exec_wait(&e->exec, &secs, err);
    e->st.forward_s += secs;
    pass_rec t = e->done; /* done is empty: finish_pass ran after the last launch */
    e->done = e->fl;
    e->fl = t;
    e->fl.n = 0;
    sample_pass(e, rc == 0, planned_ahead);
    return rc;
}

void engine_drain(engine *e) {
    di_err err;
    wait_pass(e, false, &err);
    finish_pass(e);
}

/* --- the next pass ------------------------------------------------------------ */
/* Swap space: the KV of sequences preempted by swapping is copied out of
 * their released blocks (nothing has written them since; leading blocks
 * other sequences share stay to the prefix cache), then that of sequences
 * admitted again is copied into their fresh blocks (which may be the blocks
 * just copied out; the leading blocks found in the prefix cache are shared
 * instead), before any block copy or pass writes a block. A swapped
 * sequence keeps its model state (its rings), so it resumes exactly where
 * it stopped; one whose shared prefix was evicted meanwhile drops its
 * swapped KV and its model state, and recomputes from what was found. */
static void swap_blocks(engine *e, const sched_plan *p) {
    size_t bb = e->run.kv_block_bytes;
    for (int i = 0; i < p->n_swap_outs; i++) {
        seq *q = p->swap_outs[i];
        const int *ids = p->swap_out_ids + p->swap_out_at[i];
        free(q->swap_buf);
        q->swap_buf = NULL;
        if (bb && q->swap_blocks > 0) { /* 0: all shared, or dropped since */
            char *buf = di_malloc(bb * (size_t)q->swap_blocks);
            for (int b = 0; b < q->swap_blocks; b++)
                memcpy(buf + bb * (size_t)b, e->run.kv_block_data(e->run.ctx, ids[b]), bb);
            q->swap_buf = buf;
        }
        e->st.swap_outs++;
    }
    for (int i = 0; i < p->n_swap_drops; i++) { /* recomputed from the cached prefix */
        seq *q = p->swap_drops[i];
        free(q->swap_buf);
        q->swap_buf = NULL;
        engine_seq_model_free(e, q);
        e->run.seq_init(e->run.ctx, &q->mseq);
    }
    for (int i = 0; i < p->n_swap_ins; i++) {
        seq *q = p->swap_ins[i];
        int b0 = q->swap_skip > q->swap_first ? q->swap_skip : q->swap_first;
        for (int b = b0; bb && b < q->swap_first + q->swap_blocks; b++)
            memcpy(e->run.kv_block_data(e->run.ctx, q->table.blocks[b]),
                   (const char *)q->swap_buf + bb * (size_t)(b - q->swap_first), bb);
        free(q->swap_buf);
        q->swap_buf = NULL;
        q->swapped = false;
        q->swap_first = q->swap_blocks = 0;
        e->st.swap_ins++;
    }
}

/* Whether q's next chunk (from n_computed) scores prompt tokens: every row
 * of its logits is kept. Any branch that computes the prompt scores it (the
 * same values): the root before it forks, or each of n independent ones,
 * whose first events need not come in branch order. */
static bool scores_prompt(const seq *q) {
    const ereq *r = q->owner;
    return r->plp && q->n_computed < r->r.n_prompt - 1;
}

/* Executes plan p up to the launch of its pass: failures, preemptions,
 * block copies, the batch, sliding-window restores and replays. Returns the
 * number of batch entries (0: nothing to run). */
static int prepare(engine *e, const sched_plan *p, di_err *err) {
    for (int i = 0; i < p->n_failed; i++) {
        seq *q = p->failed[i]; /* already out of the queues, blocks released */
        fail_seq(e, q, "engine: sequence does not fit in the KV pool (raise --kv-memory)");
    }
    for (int i = 0; i < p->n_preempted; i++) {
        seq *q = p->preempted[i];
        if (!q->swapped) { /* recomputed from scratch: fresh model state */
            engine_seq_model_free(e, q);
            e->run.seq_init(e->run.ctx, &q->mseq);
        }
        e->st.preemptions++;
    }
    swap_blocks(e, p); /* after the test above: a swap-in clears swapped */
    if (p->n_items == 0) return 0;
    for (int i = 0; i < p->n_cows; i++)
        if (p->cows[i].src >= 0 &&
            e->run.copy_block(e->run.ctx, p->cows[i].dst, p->cows[i].src, err))
            return -1;

    int n = p->n_items, rows = 0;
    if (n > e->cap_batch) {
        e->cap_batch = n * 2;
        e->batch = di_realloc(e->batch, sizeof *e->batch * (size_t)e->cap_batch);
    }
    for (int i = 0; i < n; i++)
        rows += scores_prompt(p->items[i].s) ? p->items[i].n_tokens : p->items[i].logits;
    if (rows > e->cap_rows) {
        e->cap_rows = rows * 2;
        free(e->logits);
        e->logits = di_malloc(sizeof(float) * (size_t)e->cap_rows * (size_t)e->run.vocab);
    }
    rows = 0;
    int n_replay = 0;
    for (int i = 0; i < n; i++) {
        seq *q = p->items[i].s;
        /* The pass reads its own copy of the table: the next step's planning
         * may grow it (or copy-on-write a block) while the pass runs. */
        if (q->table.n > q->cap_run_blocks) {
            q->cap_run_blocks = q->table.n * 2;
            q->run_blocks = di_realloc(q->run_blocks, sizeof(int) * (size_t)q->cap_run_blocks);
        }
        memcpy(q->run_blocks, q->table.blocks, sizeof(int) * (size_t)q->table.n);
        q->mseq.blocks = q->run_blocks;
        q->mseq.n_blocks = q->mseq.cap_blocks = q->table.n;
        if (q->store_load) { /* layers past 0 may still be swapping in */
            q->mseq.kv_wait = kvs_load_wait_layer;
            q->mseq.kv_wait_ctx = q->store_load;
        }
        if (e->swa && q->mseq.n_past != q->n_computed)
            swa_rebuild(e, q, &n_replay); /* a prefix hit: rings empty */
        else
            q->mseq.n_past = q->n_computed; /* differs only after a recomputing rewind */
        bool all = scores_prompt(q);
        float *lg =
            all || p->items[i].logits ? e->logits + (size_t)rows * (size_t)e->run.vocab : NULL;
        rows += all ? p->items[i].n_tokens : p->items[i].logits;
        e->batch[i] = (model_batch_seq){
            &q->mseq, q->tokens + q->n_computed, p->items[i].n_tokens, lg, all, NULL};
    }
    if (n_replay) { /* on this thread: the compute thread is idle now */
        double t0 = di_now();
        if (e->run.forward(e->run.ctx, e->replay, n_replay, err)) return -1;
        e->st.forward_s += di_now() - t0;
        for (int i = 0; i < n_replay; i++)
            swa_snapshot(e, e->replay_seq[i], e->replay_seq[i]->n_computed);
    }
    return n;
}

/* Nothing to run but store fetches in progress: a short wait (a new request
 * or a cancel ends it) instead of spinning on the scheduler. */
static void wait_for_fetches(engine *e) {
    pthread_mutex_lock(&e->mu);
    if (!e->inbox && !e->n_cancels && !e->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&e->work, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

/* Hands the prepared batch of plan p to the compute thread. From here the
 * next plan sees the pass as done: n_computed covers its tokens, and each
 * sequence it samples holds a placeholder for that token. Until the pass
 * ends, the batch's sequences (tokens, rings, run_blocks) are the compute
 * thread's: they are marked in_flight. */
static void launch(engine *e, const sched_plan *p, int n) {
    pass_rec *f = &e->fl;
    if (n > f->cap) {
        f->cap = n * 2;
        f->v = di_realloc(f->v, sizeof *f->v * (size_t)f->cap);
    }
    for (int i = 0; i < n; i++) {
        seq *q = p->items[i].s;
        int start = q->n_computed, k = p->items[i].n_tokens;
        q->in_flight = true;
        q->n_computed = start + k;
        if (p->items[i].logits) seq_append_ahead(q);
        e->batch[i].tokens = q->tokens + start; /* the placeholder may have moved them */
        float *lg = e->batch[i].logits, *rows = e->batch[i].all_logits ? lg : NULL;
        if (rows) /* the row sampled from is the chunk's last */
            lg = p->items[i].logits ? rows + (size_t)(k - 1) * (size_t)e->run.vocab : NULL;
        f->v[i] = (pass_item){.q = q, .logits = lg, .rows = rows, .end = start + k, .n_tokens = k};
    }
    f->n = n;
    engine_exec_launch(&e->exec, e->batch, n);
    e->st.steps++;
    e->st.computed_tokens += p->n_decode + p->n_prefill_tokens;
}

/* Plans the next step while the pass in flight runs; NULL when that plan
 * would need a preemption (planned again after the pass). */
static const sched_plan *plan_ahead(engine *e, double *t0, double *t1) {
    *t0 = di_now();
    const sched_plan *p = sched_schedule_ahead(e->sched);
    *t1 = di_now();
    if (p) {
        e->st.plans_ahead++;
        pthread_mutex_lock(&e->mu); /* lets a test see the plan while the pass runs */
        e->pub.plans_ahead = e->st.plans_ahead;
        pthread_mutex_unlock(&e->mu);
    }
    return p;
}

int engine_step(engine *e, di_err *err) {
    const sched_plan *p = NULL;
    if (e->fl.n) {
        double t0 = 0, t1 = 0;
        if (!e->o.no_overlap) p = plan_ahead(e, &t0, &t1);
        int rc = wait_pass(e, p != NULL, err);
        if (t1 > t0) { /* the part of the planning done before the pass ended */
            double end = e->exec.t_end < t1 ? e->exec.t_end : t1;
            double ov = end > t0 ? end - t0 : 0;
            e->st.plan_overlap_s += ov;
            e->st.plan_exposed_s += t1 - t0 - ov;
        }
        if (rc) return -1;
        if (p && e->swa) /* rings at a block boundary: snapshot before they move */
            for (int i = 0; i < e->done.n; i++)
                if (e->done.v[i].end % BM_BLOCK == 0) commit_item(e, &e->done.v[i]);
    }
    if (!p) { /* planned after the pass: its commits and events come first */
        finish_pass(e);
        if (!e->active) return 0;
        double t0 = di_now();
        p = sched_schedule(e->sched);
        e->st.plans_after++;
        e->st.plan_exposed_s += di_now() - t0;
    }
    int n = prepare(e, p, err);
    if (n < 0) {
        e->done.n = 0;
        return -1;
    }
    if (n > 0) launch(e, p, n);
    finish_pass(e); /* overlaps the pass just launched */
    if (n == 0 && sched_n_fetching(e->sched) > 0) wait_for_fetches(e);
    return 0;
}
