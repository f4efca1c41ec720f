/*
 * Out of memory at every allocation in turn, on the host backend (docs/DESIGN.md §11, "The
 * allocation sweep"). Preloaded, failalloc (tests/support/failalloc.c) counts every malloc,
 * calloc, realloc, aligned allocation and pthread_create of a window and fails the n-th. Each
 * scenario runs in a window: load a model (model scenarios), create a pipeline, submit items,
 * drain, destroy, free. For n = 1, 2, ... until n passes the window's last call, each try must
 * end one of two ways:
 *   - the call that met the failure returns GP_ENOMEM (GP_ESYS for a thread) with a message;
 *   - or everything is right (a failure the library absorbed);
 * and either way nothing the window allocated is still allocated: no failure path leaks, none
 * crashes. The unfaulted run also checks the promise that nothing allocates between create and
 * destroy: submit (the plain, prep and _ex paths), the batcher, the computes (the model
 * runtime's host layers), completions on two workers, and a stats window.
 * Fails at once when failalloc is not preloaded. Not in sanitizer builds (they own malloc).
 */
#include <dlfcn.h>
#include <gpupipe/model.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

typedef void (*arm_fn)(long);
typedef long (*disarm_fn)(long *, const char **);
typedef long (*calls_fn)(void);
static arm_fn fa_arm;
static disarm_fn fa_disarm;
static calls_fn fa_calls;

enum { N_ITEMS = 24, ITEM = 64, OUT_MAX = 1024 };

typedef struct item {
    _Atomic int calls, status;
    unsigned char out[OUT_MAX];
    size_t out_bytes;
} item;
static item items[N_ITEMS];

static void done(void *user, int status, const void *out, size_t bytes) {
    item *it = user;
    if (status == GP_OK && out && bytes <= sizeof it->out) {
        memcpy(it->out, out, bytes);
        it->out_bytes = bytes;
    }
    atomic_store(&it->status, status);
    atomic_fetch_add(&it->calls, 1);
}

/* What one try gave: the first failure (GP_OK: none) and its message; the window's call count
   when create returned and before destroy (both -1 when create failed). */
typedef struct outcome {
    int rc;
    char err[768];
    long at_create, before_destroy;
} outcome;

typedef struct scenario {
    const char *name;
    const void *img; /* a model's safetensors image; NULL: the byte transform */
    size_t img_len;
    const unsigned char *in; /* N_ITEMS inputs, in_len[i] bytes each at in_off[i] */
    size_t in_off[N_ITEMS + 1];
    unsigned char ref[N_ITEMS][OUT_MAX]; /* the unfaulted run's outputs */
    size_t ref_bytes[N_ITEMS];
} scenario;

static int twice_plus_one(void *user, const gp_batch *b) {
    (void)user;
    const unsigned char *in = b->in;
    unsigned char *out = b->out;
    for (size_t i = 0; i < b->in_total; i++)
        out[i] = (unsigned char)(2 * in[i] + 1);
    return GP_OK;
}

static int prep_copy(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    (void)user;
    if (n != slot_bytes) return GP_EINVAL;
    memcpy(slot, src, n);
    return GP_OK;
}

static void fail_with(outcome *o, int rc, const char *what, const char *detail) {
    o->rc = rc;
    snprintf(o->err, sizeof o->err, "%s: %s", what, detail);
}

/* One try of `sc`. The byte transform runs with prep and two completion workers, its items
   through submit, submit_prep and submit_ex; a model runs as gp_model_configure sets it up. */
static void try_once(scenario *sc, outcome *o) {
    memset(o, 0, sizeof *o);
    o->at_create = o->before_destroy = -1;
    memset(items, 0, sizeof items);
    gp_model *m = NULL;
    gp_config c;
    gp_config_init(&c);
    if (sc->img) {
        int rc = gp_model_load_memory(sc->img, sc->img_len, NULL, &m, o->err, sizeof o->err);
        if (rc != GP_OK) {
            GPT_CHECK(m == NULL);
            o->rc = rc;
            return;
        }
        GPT_RC(gp_model_configure(m, &c), GP_OK);
    } else {
        c.item_in_bytes = c.item_out_bytes = ITEM;
        c.completion_workers = 2;
        c.prep = prep_copy;
        c.prep_workers = 1;
        c.compute = twice_plus_one;
    }
    c.backend = GP_BACKEND_HOST;
    c.max_batch = 8;
    c.inflight = 2;
    gp_pipeline *p = NULL;
    o->rc = gp_pipeline_create(&c, &p, o->err, sizeof o->err);
    if (o->rc != GP_OK) {
        GPT_CHECK(p == NULL);
        if (m) { /* a compute's setup failure: the model's own message is the precise one */
            size_t k = strlen(o->err);
            if (k + 4 < sizeof o->err) {
                memcpy(o->err + k, " // ", 4);
                gp_model_last_error(m, o->err + k + 4, sizeof o->err - k - 4);
            }
        }
        gp_model_free(m);
        return;
    }
    /* A mark and a window allocate (gpupipe.h: GP_ENOMEM); the items' run between them may
       not: from the first submit to the end of the drain a failure is this test's. */
    gp_stats_mark *mark = NULL;
    int mrc = gp_pipeline_mark(p, &mark);
    if (mrc != GP_OK) {
        GPT_CHECK(mark == NULL);
        fail_with(o, mrc, "gp_pipeline_mark", gp_err_name(mrc));
    }
    o->at_create = fa_calls();
    for (size_t i = 0; i < N_ITEMS; i++) {
        const unsigned char *src = sc->in + sc->in_off[i];
        size_t len = sc->in_off[i + 1] - sc->in_off[i];
        int rc;
        if (m || i % 3 == 0) {
            gp_submit_args a;
            gp_submit_args_init(&a);
            a.input = src;
            a.input_bytes = len;
            a.done = done;
            a.user = &items[i];
            rc = gp_pipeline_submit_ex(p, &a, NULL);
        } else if (i % 3 == 1) {
            rc = gp_pipeline_submit_prep(p, src, len, 0, done, &items[i]);
        } else {
            rc = gp_pipeline_submit(p, src, len, done, &items[i]);
        }
        if (rc != GP_OK) {
            char perr[256] = "";
            gp_pipeline_last_error(p, perr, sizeof perr);
            fprintf(stderr, "%s: submit %zu: %s: %s\n", sc->name, i, gp_err_name(rc), perr);
            exit(1);
        }
    }
    GPT_RC(gp_pipeline_drain(p, 60 * 1000 * 1000), GP_OK);
    o->before_destroy = fa_calls();
    if (mark) {
        gp_stats s = {.struct_size = sizeof s};
        int src = gp_pipeline_stats_since(p, mark, &s);
        if (src == GP_OK)
            GPT_EQ(s.completed, N_ITEMS);
        else if (o->rc == GP_OK)
            fail_with(o, src, "gp_pipeline_stats_since", gp_err_name(src));
        gp_stats_mark_free(mark);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gp_model_free(m);
    for (size_t i = 0; i < N_ITEMS; i++) {
        GPT_EQ(atomic_load(&items[i].calls), 1);
        if (atomic_load(&items[i].status) != GP_OK) {
            fprintf(stderr, "%s: item %zu: %s\n", sc->name, i,
                    gp_err_name(atomic_load(&items[i].status)));
            exit(1);
        }
    }
}

static void sweep(scenario *sc) {
    outcome o;
    long calls = 0, live;
    const char *failed = NULL;
    /* Warm-up: the C library's own first-use allocations (stdio, thread start-up) are made
       once, outside any window. */
    fa_arm(0);
    try_once(sc, &o);
    fa_disarm(NULL, NULL);
    GPT_RC(o.rc, GP_OK);

    fa_arm(0);
    try_once(sc, &o);
    live = fa_disarm(&calls, &failed);
    if (o.rc != GP_OK) {
        fprintf(stderr, "%s: the unfaulted run: %s: %s\n", sc->name, gp_err_name(o.rc), o.err);
        exit(1);
    }
    for (size_t i = 0; i < N_ITEMS; i++) {
        sc->ref_bytes[i] = items[i].out_bytes;
        memcpy(sc->ref[i], items[i].out, items[i].out_bytes);
    }
    printf("%s: %ld allocation calls; %ld from the first submit to the end of the drain; %ld "
           "left allocated\n",
           sc->name, calls, o.before_destroy - o.at_create, live);
    GPT_EQ(live, 0);
    GPT_EQ(o.before_destroy, o.at_create); /* the run itself allocates nothing */

    int enomem = 0, esys = 0, absorbed = 0;
    for (long n = 1;; n++) {
        fa_arm(n);
        try_once(sc, &o);
        long seen = 0;
        live = fa_disarm(&seen, &failed);
        if (live != 0) {
            fprintf(stderr,
                    "%s: allocation call %ld (%s) failed: %s: %s; %ld blocks of the "
                    "try still allocated\n",
                    sc->name, n, failed ? failed : "none", gp_err_name(o.rc), o.err, live);
            exit(1);
        }
        if (!failed) { /* past the last call: a clean run */
            GPT_RC(o.rc, GP_OK);
            GPT_CHECK(n > calls);
            break;
        }
        if (o.rc == GP_OK) { /* absorbed: the outputs must be the unfaulted run's */
            for (size_t i = 0; i < N_ITEMS; i++) {
                GPT_EQ(items[i].out_bytes, sc->ref_bytes[i]);
                GPT_CHECK(memcmp(items[i].out, sc->ref[i], sc->ref_bytes[i]) == 0);
            }
            absorbed++;
            continue;
        }
        int want = strncmp(failed, "pthread_create", 14) == 0 ? GP_ESYS : GP_ENOMEM;
        if (o.rc != want || !o.err[0]) {
            fprintf(stderr,
                    "%s: allocation call %ld (%s) failed: %s \"%s\" (want %s and a "
                    "message)\n",
                    sc->name, n, failed, gp_err_name(o.rc), o.err, gp_err_name(want));
            exit(1);
        }
        if (want == GP_ESYS && esys++ == 0)
            printf("  %s, call %ld (pthread_create): %s: %.200s\n", sc->name, n, gp_err_name(o.rc),
                   o.err);
        if (want == GP_ENOMEM && enomem++ == 0)
            printf("  %s, call %ld (%s): %s: %.200s\n", sc->name, n, failed, gp_err_name(o.rc),
                   o.err);
    }
    printf("%s: each of the %ld calls failed in turn: %d gave GP_ENOMEM, %d GP_ESYS, %d were "
           "absorbed with every output right; nothing leaked\n",
           sc->name, calls, enomem, esys, absorbed);
}

/* ---- inputs --------------------------------------------------------------------------------- */

static unsigned char *bytes_inputs(scenario *sc) {
    unsigned char *in = malloc(N_ITEMS * ITEM);
    GPT_CHECK(in);
    for (size_t i = 0; i < N_ITEMS * ITEM; i++)
        in[i] = (unsigned char)(i * 31 + 7);
    for (size_t i = 0; i <= N_ITEMS; i++)
        sc->in_off[i] = i * ITEM;
    return in;
}

/* The model's items: f32 in [-1, 1), u8 pixels, or 1..12 token ids below 1000. */
static unsigned char *model_inputs(scenario *sc) {
    gp_model *m = NULL;
    char err[512] = "";
    GPT_RC(gp_model_load_memory(sc->img, sc->img_len, NULL, &m, err, sizeof err), GP_OK);
    gp_tensor_info ii;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    int var = gp_model_input_bytes(m) != ii.bytes; /* variable-length: ii is one token */
    sc->in_off[0] = 0;
    for (size_t i = 0; i < N_ITEMS; i++)
        sc->in_off[i + 1] = sc->in_off[i] + (var ? (1 + i % 12) * ii.bytes : ii.bytes);
    unsigned char *in = malloc(sc->in_off[N_ITEMS]);
    GPT_CHECK(in);
    size_t es = gp_dtype_size(ii.dtype);
    for (size_t k = 0; k < sc->in_off[N_ITEMS] / es; k++) {
        unsigned char *e = in + k * es;
        if (ii.dtype == GP_DTYPE_F32) {
            float v = (float)((k * 7919) % 200) / 100.0f - 1.0f;
            memcpy(e, &v, 4);
        } else if (ii.dtype == GP_DTYPE_U8) {
            *e = (unsigned char)(k * 13);
        } else if (ii.dtype == GP_DTYPE_I32 || ii.dtype == GP_DTYPE_U32) {
            uint32_t v = (uint32_t)((k * 37) % 1000);
            memcpy(e, &v, 4);
        } else {
            GPT_EQ(ii.dtype, GP_DTYPE_I64);
            int64_t v = (int64_t)((k * 37) % 1000);
            memcpy(e, &v, 8);
        }
    }
    gp_model_free(m);
    return in;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    fa_arm = (arm_fn)dlsym(RTLD_DEFAULT, "gpfail_arm");
    fa_disarm = (disarm_fn)dlsym(RTLD_DEFAULT, "gpfail_disarm");
    fa_calls = (calls_fn)dlsym(RTLD_DEFAULT, "gpfail_calls");
    if (!fa_arm || !fa_disarm || !fa_calls) {
        fprintf(stderr, "test_alloc_fail needs failalloc preloaded (LD_PRELOAD)\n");
        return 1;
    }
    static scenario sc[4];
    sc[0].name = "host pipeline (submit, prep, submit_ex; 2 completion workers)";
    unsigned char *in0 = bytes_inputs(&sc[0]);
    sc[0].in = in0;
    static const char *const demos[] = {"mlp", "encoder", "cnn"};
    static const char *const names[] = {
        "demo mlp: load + host layers",
        "demo encoder: load + packed token batches on the host layers",
        "demo cnn: load + u8 images through convolutions, top-5 on the host layers"};
    unsigned char *in[3];
    void *img[3];
    for (int d = 0; d < 3; d++) {
        char err[256] = "";
        GPT_RC(
            gp_model_demo_safetensors(demos[d], NULL, &img[d], &sc[1 + d].img_len, err, sizeof err),
            GP_OK);
        sc[1 + d].img = img[d];
        sc[1 + d].name = names[d];
        in[d] = model_inputs(&sc[1 + d]);
        sc[1 + d].in = in[d];
    }
    for (int i = 0; i < 4; i++)
        sweep(&sc[i]);
    free(in0);
    for (int d = 0; d < 3; d++) {
        free(in[d]);
        free(img[d]);
    }
    printf("ok\n");
    return 0;
}
