/*
 * Randomized stress, on every backend: many short rounds, each with a random config
 * (max_batch, capacity, inflight, delay, preferred sizes, full policy, completion and prep
 * workers) and 1..4 producer threads mixing submit, submit_deadline (none, expired, near, far),
 * submit_prep (some preps fail with their own code), reserve+commit, reserve+abandon, infer,
 * flush, drain, stats, and slot hiccups; callbacks sometimes submit a child item (GP_FULL_FAIL);
 * the compute fails every batch whose first_seq hashes into the round's failure set. A round ends
 * with destroy(DRAIN | CANCEL): after a quiesce (stats checked against the test's own tallies),
 * right after the producers stop, or while they are still submitting.
 *
 * Checked: every accepted item gets exactly one callback, rejected submits and abandoned
 * reservations none; each status is legal for what happened to the item (GP_ETIMEDOUT only with
 * a deadline that could pass, GP_ECANCELED only after destroy(CANCEL) began, prep codes only for
 * failing preps, GP_ECOMPUTE only inside a batch the compute failed); GP_OK outputs are
 * gpt_word of the input; with one completion worker callbacks come in submit order (per
 * producer, by reservation seq and, in rounds without infer, every item's seq reconstructed
 * from the callback order); drain covers every item accepted before it; batch traces agree with
 * the config; stats totals match. A watchdog aborts a round that runs over its limit.
 *
 * Environment: GP_STRESS_SEED (else argv[2], else from the clock), GP_STRESS_SECONDS (time
 * budget, default 10), GP_STRESS_ROUNDS (max rounds), GP_STRESS_ROUND (run only that round of
 * the seed), GP_STRESS_LIMIT_S (watchdog, default 20), GP_STRESS_VERBOSE (print every round).
 * A soak: GP_STRESS_SECONDS=600.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpt.h"

#define MAXW 8
#define MAXP 4
#define MAXOPS 300
#define MAXITEMS 8192
#define MAXSEQ (2 * MAXITEMS)
#define NO_SEQ UINT64_MAX

enum kind { K_SUBMIT, K_DEADLINE, K_PREP, K_RESERVE, K_ABANDON, K_CHILD, K_COUNT };
enum dl { DL_NONE, DL_EXPIRED, DL_FAR, DL_NEAR };
enum endmode { END_QUIESCE, END_JOINED, END_OVERLAP, END_COUNT };
enum trstate { TR_NONE, TR_OK, TR_FAIL };

static const char *kind_name[K_COUNT] = {"submit",  "deadline", "prep",
                                         "reserve", "abandon",  "child"};
static const char *end_name[END_COUNT] = {"quiesce", "joined", "overlap"};

typedef struct item {
    uint32_t tag; /* index in R.items; also input word 0 */
    uint8_t kind, dl, slow_prep;
    int8_t producer; /* -1: child */
    int prep_rc;     /* what the prep returns; 0: it succeeds */
    int32_t k;       /* per-producer submit counter */
    uint64_t seq;    /* reservations: r.seq; else NO_SEQ */
    uint32_t nonce;
    uint32_t src[MAXW];   /* input words (prep: the raw input, valid until the callback) */
    int accepted;         /* the call returned GP_OK */
    _Atomic int entered;  /* callbacks begun */
    _Atomic int finished; /* callbacks returned */
    int status, out_ok, after_destroy;
    uint64_t cb_seq; /* one worker, no infer: seq from the callback order */
} item;

typedef struct round_cfg {
    uint64_t seed;
    int round;
    size_t max_batch, capacity;
    int inflight, words, completion_workers, prep_workers;
    uint32_t max_delay_us;
    int num_preferred;
    size_t preferred[3];
    gp_full_policy policy;
    gp_destroy_mode mode;
    int end;
    int producers, ops[MAXP];
    int fail_mod;
    uint64_t fail_salt;
    int infer, children, hiccups, slow_callbacks;
    double sim_compute_us;
    double overlap_at;
    int spin_wait;
} round_cfg;

typedef struct prod {
    int id;
    uint64_t seed;
    int nops;
    int stopped; /* got GP_ESHUTDOWN */
    int32_t k;
    int eagain, eshutdown;
    int infer_acc, infer_st[16]; /* by -status */
    uint32_t first_undrained;    /* index into mine[] */
    uint32_t mine[MAXOPS];       /* accepted items, in submit order */
    uint32_t nmine;
    FILE *null;
} prod;

static struct {
    round_cfg c;
    gp_backend backend;
    gp_pipeline *p;
    gpt_gate gate;
    _Atomic int destroy_started;
    item items[MAXITEMS];
    _Atomic uint32_t nitems;
    uint8_t abandoned[MAXSEQ];
    uint8_t tr[MAXSEQ]; /* enum trstate per seq, written by on_batch */
    _Atomic int child_eagain, child_shutdown;
    _Atomic int ops_done, producers_done;
    /* one completion worker: touched only by the completion thread */
    int32_t last_k[MAXP];
    uint64_t last_seq, cursor;
    int recon;
    /* on_batch (poller thread only) */
    uint64_t tr_next, ntr, tr_items, tr_fail_items, reasons[GP_CLOSE_COUNT_];
    uint64_t tr_dispatch; /* the last trace's t_dispatch */
    /* control calls (flush, drain, stats) must not overlap destroy */
    pthread_mutex_t ctl_mu;
    pthread_cond_t ctl_cv;
    int ctl_closed, ctl_busy;
    prod prods[MAXP];
} R = {.ctl_mu = PTHREAD_MUTEX_INITIALIZER, .ctl_cv = PTHREAD_COND_INITIALIZER};

static struct {
    uint64_t rounds, items, callbacks, infers, batches, rejected;
    uint64_t st[16]; /* by -status */
    uint64_t ends[END_COUNT][2];
} TOT;

static _Atomic uint64_t wd_start_ns; /* 0: between rounds */
static double wd_limit_s = 20;

/* ---- rng ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r) {
    r->s += UINT64_C(0x9E3779B97F4A7C15);
    return mix64(r->s);
}

static int rnd(rng *r, int n) { /* 0..n-1 */
    return (int)(next(r) % (uint64_t)n);
}

/* ---- failure reporting ------------------------------------------------------------------ */

static void describe(FILE *f) {
    const round_cfg *c = &R.c;
    fprintf(f,
            "  round %d of seed 0x%llx: max_batch %zu capacity %zu inflight %d words %d "
            "delay %uus preferred",
            c->round, (unsigned long long)c->seed, c->max_batch, c->capacity, c->inflight, c->words,
            c->max_delay_us);
    for (int i = 0; i < c->num_preferred; i++)
        fprintf(f, " %zu", c->preferred[i]);
    fprintf(f,
            "%s; %s; completion_workers %d prep_workers %d; producers %d; fail_mod %d; "
            "infer %d children %d hiccups %d sim %.0fus spin_wait %d; end %s, destroy %s\n",
            c->num_preferred ? "" : " -", c->policy == GP_FULL_BLOCK ? "block" : "fail",
            c->completion_workers, c->prep_workers, c->producers, c->fail_mod, c->infer,
            c->children, c->hiccups, c->sim_compute_us, c->spin_wait, end_name[c->end],
            c->mode == GP_DESTROY_DRAIN ? "drain" : "cancel");
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stress FAILED: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    describe(stderr);
    fprintf(stderr, "  reproduce: GP_STRESS_SEED=0x%llx GP_STRESS_ROUND=%d test_stress %s\n",
            (unsigned long long)R.c.seed, R.c.round, gp_backend_name(R.backend));
    fflush(stderr);
    abort();
}

/* GNU ## swallows the comma when a check has no format arguments. */
#define CHECK(cond, fmt, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) die("%s:%d: %s: " fmt, __FILE__, __LINE__, #cond, ##__VA_ARGS__);             \
    } while (0)

#define ITEMF "item %u (%s, producer %d, k %d, seq %lld, dl %d, prep_rc %d)"
#define ITEMA(it)                                                                                  \
    (it)->tag, kind_name[(it)->kind], (it)->producer, (it)->k,                                     \
        (it)->seq == NO_SEQ ? -1LL : (long long)(it)->seq, (it)->dl, (it)->prep_rc

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t t0 = atomic_load(&wd_start_ns);
        if (t0 && (double)(gp_now_ns() - t0) * 1e-9 > wd_limit_s) {
            uint32_t n = atomic_load(&R.nitems), open = 0;
            for (uint32_t i = 0; i < n; i++)
                open += atomic_load(&R.items[i].entered) != atomic_load(&R.items[i].finished);
            fprintf(stderr,
                    "stress WATCHDOG: round ran over %.0f s (ops done %d, producers done %d, "
                    "destroy started %d, items %u, callbacks running %u)\n",
                    wd_limit_s, atomic_load(&R.ops_done), atomic_load(&R.producers_done),
                    atomic_load(&R.destroy_started), n, open);
            describe(stderr);
            fprintf(stderr, "  reproduce: GP_STRESS_SEED=0x%llx GP_STRESS_ROUND=%d\n",
                    (unsigned long long)R.c.seed, R.c.round);
            fflush(stderr);
            abort();
        }
    }
    return NULL;
}

/* ---- items ---------------------------------------------------------------------------- */

static item *new_item(int kind, int producer, int32_t k, rng *r) {
    uint32_t tag = atomic_fetch_add(&R.nitems, 1);
    CHECK(tag < MAXITEMS, "item pool exhausted");
    item *it = &R.items[tag];
    it->tag = tag;
    it->kind = (uint8_t)kind;
    it->producer = (int8_t)producer;
    it->k = k;
    it->seq = NO_SEQ;
    it->cb_seq = NO_SEQ;
    it->nonce = r ? (uint32_t)next(r) : tag * 2654435761u;
    it->src[0] = tag;
    for (int w = 1; w < MAXW; w++)
        it->src[w] = it->nonce + (uint32_t)w * 0x9E3779B9u;
    return it;
}

static int prep_status(int rc) {
    return rc == GP_OK ? GP_OK : (rc < 0 && rc >= GP_ENOTSUP ? rc : GP_EPREP);
}

static int fails(uint64_t first_seq) {
    return R.c.fail_mod && mix64(first_seq ^ R.c.fail_salt) % (uint64_t)R.c.fail_mod == 0;
}

static void sleep_us(int us) {
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

static void on_done(void *user, int status, const void *out, size_t bytes);

/* A callback submits a child item (only with GP_FULL_FAIL: a callback must not block). */
static void spawn_child(void) {
    item *it = new_item(K_CHILD, -1, 0, NULL);
    uint32_t in[MAXW];
    memcpy(in, it->src, sizeof in);
    int rc = gp_pipeline_submit(R.p, in, (size_t)R.c.words * 4, on_done, it);
    if (rc == GP_OK) {
        it->accepted = 1;
    } else if (rc == GP_EAGAIN) {
        atomic_fetch_add(&R.child_eagain, 1);
    } else {
        CHECK(rc == GP_ESHUTDOWN && atomic_load(&R.destroy_started), "child submit: %s",
              gp_err_name(rc));
        atomic_fetch_add(&R.child_shutdown, 1);
    }
}

static void on_done(void *user, int status, const void *out, size_t bytes) {
    item *it = user;
    CHECK(it >= R.items && it < R.items + MAXITEMS, "callback with a foreign user pointer");
    int prev = atomic_fetch_add(&it->entered, 1);
    CHECK(prev == 0, ITEMF ": callback %d (status %s)", ITEMA(it), prev + 1, gp_err_name(status));
    CHECK(it->kind != K_ABANDON, ITEMF ": callback for an abandoned reservation", ITEMA(it));
    if (status == GP_OK) {
        CHECK(out != NULL && bytes == (size_t)R.c.words * 4, ITEMF ": output %p, %zu bytes",
              ITEMA(it), out, bytes);
        const uint32_t *o = out;
        it->out_ok = 1;
        for (int w = 0; w < R.c.words; w++)
            it->out_ok &= o[w] == gpt_word(it->src[w]);
    } else {
        CHECK(out == NULL && bytes == 0, ITEMF ": status %s with output %p, %zu bytes", ITEMA(it),
              gp_err_name(status), out, bytes);
    }
    it->status = status;
    it->after_destroy = atomic_load(&R.destroy_started);

    if (R.c.completion_workers == 1) { /* submit order */
        if (it->producer >= 0) {
            CHECK(it->k > R.last_k[it->producer], ITEMF ": after k %d of its producer", ITEMA(it),
                  R.last_k[it->producer]);
            R.last_k[it->producer] = it->k;
        }
        if (it->seq != NO_SEQ) {
            CHECK(R.last_seq == NO_SEQ || it->seq > R.last_seq, ITEMF ": after seq %llu", ITEMA(it),
                  (unsigned long long)R.last_seq);
            R.last_seq = it->seq;
        }
        if (R.recon) {
            while (R.cursor < MAXSEQ && R.abandoned[R.cursor])
                R.cursor++;
            it->cb_seq = R.cursor++;
            CHECK(it->seq == NO_SEQ || it->seq == it->cb_seq,
                  ITEMF ": called back in the place of seq %llu", ITEMA(it),
                  (unsigned long long)it->cb_seq);
        }
    }
    if (R.c.children && it->kind != K_CHILD && (it->nonce & 15) == 0) spawn_child();
    if (R.c.slow_callbacks && (it->nonce >> 8) % 64 == 0) sleep_us(100);
    atomic_store_explicit(&it->finished, 1, memory_order_release);
}

/* ---- pipeline functions --------------------------------------------------------------- */

static int stress_compute(void *user, const gp_batch *b) {
    (void)user;
    CHECK(b->n >= 1 && b->n <= R.c.max_batch && b->capacity == R.c.max_batch,
          "batch of %zu, capacity %zu", b->n, b->capacity);
    CHECK(b->in_bytes == (size_t)R.c.words * 4 && b->out_bytes == b->in_bytes, "item bytes %zu",
          b->in_bytes);
    if (fails(b->first_seq)) return 1 + (int)(b->first_seq % 5);
    return gpt_gate_compute(&R.gate, b);
}

static int stress_prep(void *user, const void *src, size_t src_bytes, void *slot,
                       size_t slot_bytes) {
    (void)user;
    item *it = (item *)(void *)((char *)src - offsetof(item, src));
    CHECK(src_bytes == (size_t)R.c.words * 4 && slot_bytes == src_bytes, "prep bytes %zu %zu",
          src_bytes, slot_bytes);
    CHECK(atomic_load(&it->entered) == 0, ITEMF ": prep after its callback", ITEMA(it));
    if (it->slow_prep) sleep_us(50);
    if (it->prep_rc) return it->prep_rc;
    memcpy(slot, src, slot_bytes);
    return GP_OK;
}

static void on_batch(void *user, const gp_batch_trace *t) {
    (void)user;
    const round_cfg *c = &R.c;
    CHECK(t->n >= 1 && t->n <= c->max_batch, "trace n %zu", t->n);
    CHECK(t->first_seq >= R.tr_next, "trace at seq %llu before %llu",
          (unsigned long long)t->first_seq, (unsigned long long)R.tr_next);
    CHECK(t->first_seq + t->n <= MAXSEQ, "seq %llu", (unsigned long long)t->first_seq);
    CHECK(t->slot >= 0 && t->slot < c->inflight, "slot %d", t->slot);
    int bad = fails(t->first_seq);
    CHECK(t->status == (bad ? GP_ECOMPUTE : GP_OK), "batch at seq %llu: status %s",
          (unsigned long long)t->first_seq, gp_err_name(t->status));
    CHECK(t->t_start <= t->t_h2d_done && t->t_h2d_done <= t->t_compute_done &&
              t->t_compute_done <= t->t_d2h_done,
          "stage times out of order");
    /* t_dispatch is the batcher's host clock: in dispatch order (traces are), and before this
       call, which follows the batch's completion. Not checked against t_start: CUDA's event
       times reach this clock through an anchor, and on the simulated device under load they
       were 1.8 ms early. */
    uint64_t now = gp_now_ns();
    CHECK(t->t_dispatch > 0 && t->t_dispatch >= R.tr_dispatch && t->t_dispatch <= now,
          "t_dispatch %llu: the previous trace's %llu, now %llu", (unsigned long long)t->t_dispatch,
          (unsigned long long)R.tr_dispatch, (unsigned long long)now);
    R.tr_dispatch = t->t_dispatch;
    switch (t->reason) {
    case GP_CLOSE_FULL:
        CHECK(t->n == c->max_batch, "full batch of %zu", t->n);
        break;
    case GP_CLOSE_PREFERRED:
        CHECK(c->max_delay_us && c->num_preferred && t->n == c->preferred[c->num_preferred - 1],
              "preferred batch of %zu", t->n);
        break;
    case GP_CLOSE_DELAY:
        CHECK(c->max_delay_us > 0, "delay close without a delay");
        break;
    case GP_CLOSE_SLOT_FREE:
        CHECK(c->max_delay_us == 0, "slot-free close with a delay");
        break;
    case GP_CLOSE_FLUSH:
        break;
    case GP_CLOSE_SHUTDOWN:
        CHECK(atomic_load(&R.destroy_started), "shutdown close before destroy");
        break;
    default:
        die("close reason %d", (int)t->reason);
    }
    for (uint64_t s = t->first_seq; s < t->first_seq + t->n; s++)
        R.tr[s] = bad ? TR_FAIL : TR_OK;
    R.tr_next = t->first_seq + t->n;
    R.ntr++;
    R.tr_items += t->n;
    if (bad) R.tr_fail_items += t->n;
    R.reasons[t->reason]++;
}

/* ---- producers ------------------------------------------------------------------------ */

static int ctl_enter(void) {
    pthread_mutex_lock(&R.ctl_mu);
    int ok = !R.ctl_closed;
    if (ok) R.ctl_busy++;
    pthread_mutex_unlock(&R.ctl_mu);
    return ok;
}

static void ctl_leave(void) {
    pthread_mutex_lock(&R.ctl_mu);
    if (--R.ctl_busy == 0) pthread_cond_broadcast(&R.ctl_cv);
    pthread_mutex_unlock(&R.ctl_mu);
}

static void ctl_close(void) {
    pthread_mutex_lock(&R.ctl_mu);
    R.ctl_closed = 1;
    while (R.ctl_busy)
        pthread_cond_wait(&R.ctl_cv, &R.ctl_mu);
    pthread_mutex_unlock(&R.ctl_mu);
}

/* A submit-family return: 1 accepted, 0 refused (legally). */
static int accepted(prod *P, int rc, const char *what) {
    if (rc == GP_OK) return 1;
    if (rc == GP_EAGAIN) {
        CHECK(R.c.policy == GP_FULL_FAIL, "%s: GP_EAGAIN with GP_FULL_BLOCK", what);
        P->eagain++;
        return 0;
    }
    CHECK(rc == GP_ESHUTDOWN, "%s returned %s", what, gp_err_name(rc));
    CHECK(atomic_load(&R.destroy_started), "%s: GP_ESHUTDOWN before destroy", what);
    P->eshutdown++;
    P->stopped = 1;
    return 0;
}

static uint64_t pick_deadline(rng *r, item *it) {
    uint64_t now = gp_now_ns();
    switch (rnd(r, 4)) {
    case 0:
        it->dl = DL_NONE;
        return 0;
    case 1:
        it->dl = DL_EXPIRED;
        return now - 1 - (uint64_t)rnd(r, 1000000);
    case 2:
        it->dl = DL_FAR;
        return now + UINT64_C(60000000000);
    default:
        it->dl = DL_NEAR;
        return now + (uint64_t)rnd(r, 500000);
    }
}

static void mine(prod *P, item *it) {
    it->accepted = 1;
    P->mine[P->nmine++] = it->tag;
}

static void op_submit(prod *P, rng *r, int kind) {
    item *it = new_item(kind, P->id, P->k++, r);
    size_t bytes = (size_t)R.c.words * 4;
    int rc;
    if (kind == K_PREP) {
        uint64_t dl = rnd(r, 3) ? 0 : pick_deadline(r, it);
        if (rnd(r, 8) == 0) {
            static const int codes[] = {GP_EINVAL, GP_EIO, GP_ENOMEM, GP_EPREP, 5, -100};
            it->prep_rc = codes[rnd(r, 6)];
        }
        it->slow_prep = rnd(r, 32) == 0;
        rc = gp_pipeline_submit_prep(R.p, it->src, bytes, dl, on_done, it);
    } else {
        uint32_t in[MAXW];
        memcpy(in, it->src, sizeof in);
        uint64_t dl = kind == K_DEADLINE ? pick_deadline(r, it) : 0;
        rc = gp_pipeline_submit_deadline(R.p, in, bytes, dl, on_done, it);
        memset(in, 0xA5, sizeof in); /* the input may be reused once submit returned */
    }
    if (accepted(P, rc, kind == K_PREP ? "submit_prep" : "submit")) mine(P, it);
}

static void op_reserve(prod *P, rng *r, int abandon) {
    gp_reservation res;
    memset(&res, 0, sizeof res);
    int rc = gp_pipeline_reserve(R.p, &res);
    if (!accepted(P, rc, "reserve")) return;
    CHECK(res.data && res.bytes == (size_t)R.c.words * 4 && res.deadline_ns == 0 &&
              res.seq < MAXSEQ,
          "reservation %p %zu seq %llu", res.data, res.bytes, (unsigned long long)res.seq);
    item *it = new_item(abandon ? K_ABANDON : K_RESERVE, P->id, abandon ? -1 : P->k++, r);
    it->seq = res.seq;
    if (abandon) {
        R.abandoned[res.seq] = 1; /* before the abandon publishes it */
        memset(res.data, 0x5A, res.bytes);
        GPT_RC(gp_pipeline_abandon(R.p, &res), GP_OK);
        return;
    }
    memcpy(res.data, it->src, res.bytes);
    if (rnd(r, 3) == 0) res.deadline_ns = pick_deadline(r, it);
    rc = gp_pipeline_commit(R.p, &res, on_done, it);
    CHECK(rc == GP_OK, "commit returned %s", gp_err_name(rc));
    CHECK(res.data == NULL, "commit left the reservation open");
    mine(P, it);
}

static void op_infer(prod *P, rng *r) {
    uint32_t in[MAXW], out[MAXW];
    for (int w = 0; w < MAXW; w++)
        in[w] = (uint32_t)next(r);
    memset(out, 0, sizeof out);
    size_t bytes = (size_t)R.c.words * 4;
    int rc = gp_pipeline_infer(R.p, in, bytes, out, bytes);
    if (rc == GP_EAGAIN || rc == GP_ESHUTDOWN) {
        accepted(P, rc, "infer");
        return;
    }
    P->infer_acc++;
    CHECK(rc == GP_OK || (rc == GP_ECOMPUTE && R.c.fail_mod) ||
              (rc == GP_ECANCELED && R.c.mode == GP_DESTROY_CANCEL &&
               atomic_load(&R.destroy_started)),
          "infer returned %s", gp_err_name(rc));
    P->infer_st[-rc]++;
    if (rc == GP_OK)
        for (int w = 0; w < R.c.words; w++)
            CHECK(out[w] == gpt_word(in[w]), "infer output word %d", w);
}

static void op_drain(prod *P, rng *r) {
    if (!ctl_enter()) return;
    int64_t timeout = rnd(r, 2) ? -1 : rnd(r, 2000);
    int rc = gp_pipeline_drain(R.p, timeout);
    CHECK(rc == GP_OK || (rc == GP_ETIMEDOUT && timeout >= 0), "drain returned %s",
          gp_err_name(rc));
    if (rc == GP_OK) { /* every item this producer had accepted has had its callback */
        for (uint32_t i = P->first_undrained; i < P->nmine; i++) {
            item *it = &R.items[P->mine[i]];
            CHECK(atomic_load_explicit(&it->finished, memory_order_acquire) == 1,
                  ITEMF ": no callback when drain returned", ITEMA(it));
        }
        P->first_undrained = P->nmine;
    }
    ctl_leave();
}

static void op_stats(prod *P, rng *r) {
    if (!ctl_enter()) return;
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(R.p, &s), GP_OK);
    CHECK(s.completed <= s.submitted, "stats: completed %llu > submitted %llu",
          (unsigned long long)s.completed, (unsigned long long)s.submitted);
    CHECK(s.completed_ok + s.timed_out + s.canceled + s.failed >= s.completed,
          "stats: per-status counts below completed");
    CHECK(s.max_batch == R.c.max_batch && s.inflight == R.c.inflight, "stats config");
    switch (rnd(r, 8)) {
    case 0:
        GPT_RC(gp_pipeline_stats_json(R.p, P->null), GP_OK);
        break;
    case 1:
        GPT_RC(gp_pipeline_stats_prometheus(R.p, P->null), GP_OK);
        break;
    case 2:
        GPT_RC(gp_pipeline_report(R.p, P->null), GP_OK);
        break;
    }
    ctl_leave();
}

static void *producer_main(void *arg) {
    prod *P = arg;
    rng r = {P->seed};
    int prep = R.c.prep_workers > 0;
    for (int op = 0; op < P->nops && !P->stopped; op++) {
        int w = rnd(&r, 100);
        if (w < 28) {
            op_submit(P, &r, K_SUBMIT);
        } else if (w < 44) {
            op_submit(P, &r, K_DEADLINE);
        } else if (w < 60) {
            op_submit(P, &r, prep ? K_PREP : K_SUBMIT);
        } else if (w < 78) {
            op_reserve(P, &r, 0);
        } else if (w < 84) {
            op_reserve(P, &r, 1);
        } else if (w < 88) {
            if (R.c.infer)
                op_infer(P, &r);
            else
                op_submit(P, &r, K_SUBMIT);
        } else if (w < 91) {
            if (ctl_enter()) {
                GPT_RC(gp_pipeline_flush(R.p), GP_OK);
                ctl_leave();
            }
        } else if (w < 93) {
            op_drain(P, &r);
        } else if (w < 95) {
            op_stats(P, &r);
        } else if (w < 97) {
            if (R.c.hiccups) { /* hold the slots for a moment: the ring fills */
                gpt_gate_close(&R.gate);
                sleep_us(50 + rnd(&r, 500));
                gpt_gate_open(&R.gate);
            }
        } else {
            if (rnd(&r, 2))
                sched_yield();
            else
                sleep_us(rnd(&r, 200));
        }
        atomic_fetch_add(&R.ops_done, 1);
    }
    atomic_fetch_add(&R.producers_done, 1);
    return NULL;
}

/* ---- destroy held before the free ------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int on;
} H = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void hold_set(int on) {
    pthread_mutex_lock(&H.mu);
    H.on = on;
    pthread_cond_broadcast(&H.cv);
    pthread_mutex_unlock(&H.mu);
}

static int stress_setup(void *user, const gp_batch *b) {
    return GP_OK;
}

static void stress_teardown(void *user, const gp_batch *b) {
    pthread_mutex_lock(&H.mu);
    while (H.on)
        pthread_cond_wait(&H.cv, &H.mu);
    pthread_mutex_unlock(&H.mu);
}

typedef struct destroy_arg {
    int rc;
} destroy_arg;

static void *destroy_thread(void *arg) {
    destroy_arg *d = arg;
    d->rc = gp_pipeline_destroy(R.p, R.c.mode);
    return NULL;
}

/* ---- a round -------------------------------------------------------------------------- */

static void pick_config(uint64_t seed, int round) {
    round_cfg *c = &R.c;
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->round = round;
    rng r = {mix64(seed ^ mix64((uint64_t)round))};
    static const size_t mb[] = {1, 2, 3, 4, 7, 8, 16, 31, 32, 64};
    c->max_batch = rnd(&r, 2) ? mb[rnd(&r, 10)] : (size_t)(1 + rnd(&r, 64));
    size_t pow2 = 1;
    while (pow2 < c->max_batch)
        pow2 <<= 1;
    c->capacity = rnd(&r, 6) == 0 ? 0 : pow2 << rnd(&r, 4); /* 0: the library's default */
    c->inflight = 1 + rnd(&r, 4);
    c->words = 1 + rnd(&r, MAXW);
    static const uint32_t delays[] = {20, 100, 500, 2000};
    c->max_delay_us = rnd(&r, 2) ? 0 : delays[rnd(&r, 4)];
    if (rnd(&r, 4) == 0) {
        size_t last = 0;
        for (int i = 0; i < 3 && last < c->max_batch; i++) {
            size_t v = last + 1 + (size_t)rnd(&r, (int)(c->max_batch - last));
            c->preferred[c->num_preferred++] = v;
            last = v;
        }
    }
    c->policy = rnd(&r, 2) ? GP_FULL_BLOCK : GP_FULL_FAIL;
    c->completion_workers = 1 + (rnd(&r, 2) ? 0 : rnd(&r, 3));
    c->prep_workers = rnd(&r, 3);
    c->mode = rnd(&r, 2) ? GP_DESTROY_DRAIN : GP_DESTROY_CANCEL;
    c->end = rnd(&r, END_COUNT);
    c->producers = 1 + rnd(&r, MAXP);
    for (int i = 0; i < c->producers; i++)
        c->ops[i] = 20 + rnd(&r, MAXOPS - 20);
    c->fail_mod = rnd(&r, 2) ? 0 : 2 + rnd(&r, 8);
    c->fail_salt = next(&r);
    c->infer = rnd(&r, 2);
    c->children = c->policy == GP_FULL_FAIL && rnd(&r, 2);
    c->hiccups = rnd(&r, 2);
    c->slow_callbacks = rnd(&r, 4) == 0;
    c->sim_compute_us = rnd(&r, 4) == 0 ? 5 + rnd(&r, 100) : 0;
    c->overlap_at = (double)rnd(&r, 1001) / 1000.0;
    c->spin_wait = rnd(&r, 4) == 0; /* drawn last: the earlier draws of a seed stay as they were */
}

static void reset_round(void) {
    uint32_t n = atomic_load(&R.nitems);
    memset(R.items, 0, (n < MAXITEMS ? n : MAXITEMS) * sizeof R.items[0]);
    atomic_store(&R.nitems, 0);
    memset(R.abandoned, 0, sizeof R.abandoned);
    memset(R.tr, 0, sizeof R.tr);
    atomic_store(&R.destroy_started, 0);
    atomic_store(&R.child_eagain, 0);
    atomic_store(&R.child_shutdown, 0);
    atomic_store(&R.ops_done, 0);
    atomic_store(&R.producers_done, 0);
    for (int i = 0; i < MAXP; i++)
        R.last_k[i] = -1;
    R.last_seq = NO_SEQ;
    R.cursor = 0;
    R.recon = R.c.completion_workers == 1 && !R.c.infer;
    R.tr_next = R.ntr = R.tr_items = R.tr_fail_items = R.tr_dispatch = 0;
    memset(R.reasons, 0, sizeof R.reasons);
    R.ctl_closed = R.ctl_busy = 0;
}

/* The legal statuses of one item, given what happened to it. */
static void check_item(const item *it) {
    int n = atomic_load(&it->entered);
    CHECK(n == atomic_load(&it->finished), ITEMF ": callback still running after destroy",
          ITEMA(it));
    if (!it->accepted || it->kind == K_ABANDON) {
        CHECK(n == 0, ITEMF ": callback for an item never accepted", ITEMA(it));
        return;
    }
    CHECK(n == 1, ITEMF ": no callback", ITEMA(it));
    int s = it->status, cancel = R.c.mode == GP_DESTROY_CANCEL;
    int prep_fails = it->kind == K_PREP && it->prep_rc != 0;
    uint64_t seq = it->seq != NO_SEQ ? it->seq : it->cb_seq;
    int tr = seq == NO_SEQ ? -1 : R.tr[seq];
    switch (s) {
    case GP_OK:
        CHECK(!prep_fails && it->dl != DL_EXPIRED && it->out_ok && (tr == -1 || tr == TR_OK),
              ITEMF ": GP_OK (output %s, batch state %d)", ITEMA(it),
              it->out_ok ? "right" : "WRONG", tr);
        break;
    case GP_ETIMEDOUT:
        CHECK(!prep_fails && (it->dl == DL_EXPIRED || it->dl == DL_NEAR), ITEMF ": GP_ETIMEDOUT",
              ITEMA(it));
        break;
    case GP_ECANCELED:
        CHECK(cancel && it->after_destroy, ITEMF ": GP_ECANCELED", ITEMA(it));
        break;
    case GP_ECOMPUTE:
        CHECK(R.c.fail_mod && !prep_fails && it->dl != DL_EXPIRED && (tr == -1 || tr == TR_FAIL),
              ITEMF ": GP_ECOMPUTE (batch state %d)", ITEMA(it), tr);
        break;
    default:
        CHECK(prep_fails && s == prep_status(it->prep_rc), ITEMF ": %s", ITEMA(it), gp_err_name(s));
    }
    if (prep_fails)
        CHECK(s == prep_status(it->prep_rc) || s == GP_ECANCELED, ITEMF ": failing prep got %s",
              ITEMA(it), gp_err_name(s));
    if (it->dl == DL_EXPIRED && !prep_fails)
        CHECK(s == GP_ETIMEDOUT || s == GP_ECANCELED, ITEMF ": expired item got %s", ITEMA(it),
              gp_err_name(s));
}

typedef struct tally {
    uint64_t accepted, st[16], rejected;
} tally;

static void count(tally *t) {
    memset(t, 0, sizeof *t);
    uint32_t n = atomic_load(&R.nitems);
    for (uint32_t i = 0; i < n; i++) {
        const item *it = &R.items[i];
        if (!it->accepted || it->kind == K_ABANDON) continue;
        t->accepted++;
        if (atomic_load_explicit(&it->finished, memory_order_acquire)) t->st[-it->status]++;
    }
    for (int p = 0; p < R.c.producers; p++) {
        const prod *P = &R.prods[p];
        t->accepted += (uint64_t)P->infer_acc;
        for (int s = 0; s < 16; s++)
            t->st[s] += (uint64_t)P->infer_st[s];
        t->rejected += (uint64_t)P->eagain;
    }
    t->rejected += (uint64_t)atomic_load(&R.child_eagain);
}

/* Producers stopped: drain until nothing is left, then every counter must match ours. */
static void quiesce_and_check_stats(void) {
    gp_stats s = {.struct_size = sizeof s};
    for (int i = 0;; i++) {
        GPT_RC(gp_pipeline_drain(R.p, -1), GP_OK);
        GPT_RC(gp_pipeline_stats(R.p, &s), GP_OK);
        if (s.completed == s.submitted) break;
        CHECK(i < 4, "drain returned with %llu of %llu completed", (unsigned long long)s.completed,
              (unsigned long long)s.submitted);
    }
    tally t;
    count(&t);
    uint64_t done = 0;
    for (int k = 0; k < 16; k++)
        done += t.st[k];
    uint64_t failed = done - t.st[0] - t.st[-GP_ETIMEDOUT] - t.st[-GP_ECANCELED];
#define SAME(a, b)                                                                                 \
    CHECK((uint64_t)(a) == (uint64_t)(b), "stats %s = %llu, expected %llu", #a,                    \
          (unsigned long long)(a), (unsigned long long)(b))
    SAME(done, t.accepted); /* every accepted item had its callback */
    SAME(s.submitted, t.accepted);
    SAME(s.completed, done);
    SAME(s.completed_ok, t.st[0]);
    SAME(s.timed_out, t.st[-GP_ETIMEDOUT]);
    SAME(s.canceled, 0);
    SAME(s.failed, failed);
    SAME(s.rejected_full, t.rejected);
    SAME(s.batches, R.ntr);
    SAME(s.batch_items, R.tr_items);
    uint64_t reasons = 0, hist = 0;
    for (int k = 0; k < GP_CLOSE_BYTES; k++) {
        SAME(s.close_reasons[k], R.reasons[k]);
        reasons += s.close_reasons[k];
    }
    SAME(s.close_bytes, R.reasons[GP_CLOSE_BYTES]); /* fixed-size items: 0 */
    reasons += s.close_bytes;
    for (int k = 0; k < GP_HIST_BUCKETS; k++)
        hist += s.batch_hist[k];
    SAME(reasons, s.batches);
    SAME(hist, s.batches);
    SAME(t.st[-GP_ECOMPUTE] <= R.tr_fail_items, 1);
#undef SAME
}

static void run_round(uint64_t seed, int round) {
    pick_config(seed, round);
    reset_round();
    const round_cfg *c = &R.c;
    if (getenv("GP_STRESS_VERBOSE")) describe(stdout);
    atomic_store(&wd_start_ns, gp_now_ns());

    gpt_gate_init(&R.gate);
    gpt_gate_open(&R.gate);
    gp_config cfg;
    gpt_config(&cfg, R.backend);
    cfg.item_in_bytes = cfg.item_out_bytes = (size_t)c->words * 4;
    cfg.max_batch = c->max_batch;
    cfg.capacity = c->capacity;
    cfg.inflight = c->inflight;
    cfg.max_delay_us = c->max_delay_us;
    cfg.num_preferred = c->num_preferred;
    for (int i = 0; i < c->num_preferred; i++)
        cfg.preferred[i] = c->preferred[i];
    cfg.full_policy = c->policy;
    cfg.compute = stress_compute;
    cfg.completion_workers = c->completion_workers;
    cfg.prep_workers = c->prep_workers;
    cfg.prep = c->prep_workers ? stress_prep : NULL;
    cfg.on_batch = on_batch;
    cfg.compute_setup = stress_setup;
    cfg.compute_teardown = stress_teardown;
    cfg.sim_compute_us = c->sim_compute_us;
    cfg.spin_wait = c->spin_wait;
    R.p = gpt_create(&cfg);

    pthread_t th[MAXP];
    int total_ops = 0;
    for (int i = 0; i < c->producers; i++) {
        prod *P = &R.prods[i];
        FILE *null = P->null;
        memset(P, 0, sizeof *P);
        P->null = null;
        P->id = i;
        P->seed = mix64(seed ^ mix64((uint64_t)round * 131 + (uint64_t)i + 1));
        P->nops = c->ops[i];
        total_ops += P->nops;
        GPT_EQ(pthread_create(&th[i], NULL, producer_main, P), 0);
    }

    if (c->end == END_OVERLAP) { /* destroy while producers still submit */
        int target = (int)(c->overlap_at * total_ops);
        while (atomic_load(&R.ops_done) < target && atomic_load(&R.producers_done) < c->producers)
            sleep_us(50);
    } else {
        for (int i = 0; i < c->producers; i++)
            GPT_EQ(pthread_join(th[i], NULL), 0);
        if (c->end == END_QUIESCE) quiesce_and_check_stats();
    }
    ctl_close();
    atomic_store(&R.destroy_started, 1);
    int rc;
    if (c->end == END_OVERLAP) {
        /* A call that starts after destroy's last look at the call counters would touch freed
           memory, so the producers must be done before destroy can free: compute_teardown,
           which runs after every library thread is joined and before the free, holds destroy
           until they are joined here. Their calls meanwhile see a closed pipeline. */
        destroy_arg d = {GP_OK};
        pthread_t dt;
        hold_set(1);
        GPT_EQ(pthread_create(&dt, NULL, destroy_thread, &d), 0);
        for (int i = 0; i < c->producers; i++)
            GPT_EQ(pthread_join(th[i], NULL), 0);
        hold_set(0);
        GPT_EQ(pthread_join(dt, NULL), 0);
        rc = d.rc;
    } else {
        rc = gp_pipeline_destroy(R.p, c->mode);
    }
    CHECK(rc == GP_OK, "destroy returned %s", gp_err_name(rc));
    R.p = NULL;

    uint32_t n = atomic_load(&R.nitems);
    for (uint32_t i = 0; i < n; i++)
        check_item(&R.items[i]);
    tally t;
    count(&t);
    CHECK(t.st[-GP_ECOMPUTE] <= R.tr_fail_items, "%llu GP_ECOMPUTE items, failed batches held %llu",
          (unsigned long long)t.st[-GP_ECOMPUTE], (unsigned long long)R.tr_fail_items);
    if (c->mode == GP_DESTROY_DRAIN) CHECK(t.st[-GP_ECANCELED] == 0, "canceled in a drain round");
    for (int i = 0; i < c->producers; i++)
        CHECK(c->end == END_OVERLAP || R.prods[i].eshutdown == 0, "GP_ESHUTDOWN before destroy");

    TOT.rounds++;
    TOT.ends[c->end][c->mode]++;
    TOT.items += t.accepted;
    TOT.rejected += t.rejected;
    TOT.batches += R.ntr;
    for (int k = 0; k < 16; k++) {
        TOT.st[k] += t.st[k];
        TOT.callbacks += t.st[k];
    }
    for (int i = 0; i < c->producers; i++)
        TOT.infers += (uint64_t)R.prods[i].infer_acc;
    pthread_cond_destroy(&R.gate.cv);
    pthread_mutex_destroy(&R.gate.mu);
    atomic_store(&wd_start_ns, 0);
}

static double env_num(const char *name, double dflt) {
    const char *v = getenv(name);
    return v && *v ? strtod(v, NULL) : dflt;
}

int main(int argc, char **argv) {
    R.backend = gpt_backend(argc, argv);
    uint64_t seed = mix64(gp_now_ns() ^ (uint64_t)getpid());
    const char *s = getenv("GP_STRESS_SEED");
    if (s && *s)
        seed = strtoull(s, NULL, 0);
    else if (argc > 2)
        seed = strtoull(argv[2], NULL, 0);
    double budget = env_num("GP_STRESS_SECONDS", 10);
    long max_rounds = (long)env_num("GP_STRESS_ROUNDS", 0);
    long only = (long)env_num("GP_STRESS_ROUND", -1);
    wd_limit_s = env_num("GP_STRESS_LIMIT_S", 20);
    printf(
        "stress: seed 0x%llx, backend %s, budget %.0f s (reproduce with GP_STRESS_SEED=0x%llx)\n",
        (unsigned long long)seed, gp_backend_name(R.backend), budget, (unsigned long long)seed);
    fflush(stdout);

    for (int i = 0; i < MAXP; i++) {
        R.prods[i].null = fopen("/dev/null", "w");
        GPT_CHECK(R.prods[i].null);
    }
    pthread_t wd;
    GPT_EQ(pthread_create(&wd, NULL, watchdog, NULL), 0);
    GPT_EQ(pthread_detach(wd), 0);

    double t0 = gpt_now();
    if (only >= 0) {
        run_round(seed, (int)only);
    } else {
        for (int round = 0; max_rounds == 0 || round < max_rounds; round++) {
            if (gpt_now() - t0 >= budget) break;
            run_round(seed, round);
        }
    }
    double dt = gpt_now() - t0;
    printf("stress: %llu rounds in %.1f s: %llu items accepted (%llu infer), %llu rejected "
           "(full), %llu callbacks, %llu device batches\n",
           (unsigned long long)TOT.rounds, dt, (unsigned long long)TOT.items,
           (unsigned long long)TOT.infers, (unsigned long long)TOT.rejected,
           (unsigned long long)TOT.callbacks, (unsigned long long)TOT.batches);
    printf("  statuses:");
    for (int k = 0; k < 16; k++)
        if (TOT.st[k]) printf(" %s %llu", gp_err_name(-k), (unsigned long long)TOT.st[k]);
    printf("\n  rounds by end (drain/cancel):");
    for (int e = 0; e < END_COUNT; e++)
        printf(" %s %llu/%llu", end_name[e], (unsigned long long)TOT.ends[e][0],
               (unsigned long long)TOT.ends[e][1]);
    printf("\nstress: ok on %s\n", gp_backend_name(R.backend));
    for (int i = 0; i < MAXP; i++)
        fclose(R.prods[i].null);
    return 0;
}
