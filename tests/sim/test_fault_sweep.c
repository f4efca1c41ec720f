/*
 * Out of memory at every step of create, on the simulated device (docs/DESIGN.md §11, "The
 * fault sweep"). gpsim counts every call that creates something the program must release
 * (cudaMalloc, cudaHostAlloc, streams, events, captured graphs and their instantiation,
 * cuBLAS / cuBLASLt handles and descriptors, cuDNN handles and descriptors) and can fail the
 * n-th one as an allocation failure. For n = 1, 2, ... this test arms call n, creates a
 * pipeline, runs items through it when create succeeds, destroys it, and checks:
 *   - create fails with GP_ENOMEM, and its message (or the model's last error) names the call
 *     that failed; or it succeeds because the library fell back (cuDNN unusable: the direct
 *     kernel; a graph that cannot be made: that bucket eager), and then every item is right;
 *   - after each try the program holds exactly what it held before (gpsim's ledger of live
 *     device and pinned allocations, streams, events, graphs, handles and descriptors):
 *     no failure path leaks, none frees twice (gpsim would fail the free);
 * until n passes the last create call (nothing failed: the run must then be clean). Each
 * scenario prints how many create calls its pipeline makes and what each failure gave.
 * Not a GPU test: it needs gpsim's hooks, and fails at once without them.
 */
#include <dlfcn.h>
#include <gpupipe/model.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "model/safetensors.h"

typedef void (*arm_fn)(long);
typedef const char *(*fired_fn)(long *);
typedef long (*live_fn)(char *, size_t);
static arm_fn sim_arm;
static fired_fn sim_fired;
static live_fn sim_live;

enum { N_ITEMS = 37, WORDS = 16 };

typedef struct scenario {
    const char *name;
    gp_model *(*load)(void); /* NULL: the tests' transform kernel (gpt_transform) */
    int graphs;
} scenario;

typedef struct outcome {
    int rc;
    char err[1024];
    int items_ok; /* every item once, GP_OK, right output */
} outcome;

typedef struct model_item {
    float *out;
    size_t floats;
    int calls, status;
} model_item;

static void model_done(void *user, int status, const void *out, size_t bytes) {
    model_item *it = user;
    it->calls++;
    it->status = status;
    if (status == GP_OK && out && bytes == it->floats * sizeof(float)) memcpy(it->out, out, bytes);
}

/* Item i's bytes: the model's item, or for a variable-length model 1 + i % 12 tokens. */
static size_t item_bytes(const gp_model *m, size_t i) {
    gp_tensor_info ii;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    size_t ib = gp_model_input_bytes(m);
    return ib == ii.bytes ? ib : (1 + i % 12) * ii.bytes; /* ii: one token */
}

/* N_ITEMS items of the largest size each: f32 in [-1, 1), u8 pixels, token ids below 1000. */
static unsigned char *model_inputs(const gp_model *m) {
    size_t ib = gp_model_input_bytes(m);
    unsigned char *in = malloc(N_ITEMS * ib);
    GPT_CHECK(in);
    for (size_t i = 0; i < N_ITEMS * ib; i++)
        in[i] = (unsigned char)((i * 2654435761u) >> 13);
    gp_tensor_info ii;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    if (ii.dtype == GP_DTYPE_F32) {
        float *f = (float *)(void *)in;
        for (size_t i = 0; i < N_ITEMS * ib / 4; i++)
            f[i] = (float)((i * 7919u) % 200) / 100.0f - 1.0f;
    } else if (ii.dtype == GP_DTYPE_I32) {
        int32_t *t = (int32_t *)(void *)in;
        for (size_t i = 0; i < N_ITEMS * ib / 4; i++)
            t[i] = (int32_t)((i * 37) % 1000);
    }
    return in;
}

/* One try: create, and when that succeeds run N_ITEMS items and destroy. A model scenario
   loads its model first and frees it last (a model keeps its device weights and its
   algorithm choices between pipelines: every try starts from none), and `out` receives its
   outputs (N_ITEMS * *out_floats). */
static void try_once(const scenario *sc, outcome *o, float **out, size_t *out_floats) {
    gp_config c;
    gpt_config(&c, GP_BACKEND_CUDA);
    gp_model *m = sc->load ? sc->load() : NULL;
    if (m) {
        *out_floats = gp_model_output_bytes(m) / sizeof(float);
        if (!*out) *out = calloc(N_ITEMS * *out_floats, sizeof **out);
        GPT_CHECK(*out);
        GPT_RC(gp_model_configure(m, &c), GP_OK);
        c.backend = GP_BACKEND_CUDA;
    } else {
        c.item_in_bytes = c.item_out_bytes = WORDS * 4;
        c.compute = gpt_transform;
    }
    c.max_batch = 8; /* buckets 1, 2, 4, 8 */
    c.inflight = 2;
    c.cuda_graphs = sc->graphs;
    gp_pipeline *p = NULL;
    memset(o, 0, sizeof *o);
    o->rc = gp_pipeline_create(&c, &p, o->err, sizeof o->err);
    if (o->rc != GP_OK) {
        GPT_CHECK(p == NULL);
        if (m) { /* a compute's setup failure: the model says which call */
            size_t k = strlen(o->err);
            if (k + 4 < sizeof o->err) {
                memcpy(o->err + k, " // ", 4);
                gp_model_last_error(m, o->err + k + 4, sizeof o->err - k - 4);
            }
            gp_model_free(m);
        }
        return;
    }
    int ok = 1;
    if (m) {
        size_t ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
        unsigned char *in = model_inputs(m);
        model_item it[N_ITEMS];
        for (size_t i = 0; i < N_ITEMS; i++) {
            it[i] = (model_item){*out + i * *out_floats, *out_floats, 0, -1};
            GPT_RC(gp_pipeline_submit(p, in + i * ib, item_bytes(m, i), model_done, &it[i]), GP_OK);
        }
        gpu_drain(p);
        for (size_t i = 0; i < N_ITEMS; i++)
            ok &= it[i].calls == 1 && it[i].status == GP_OK;
        GPT_EQ(ob, *out_floats * sizeof(float));
        free(in);
    } else {
        static gpu_item items[N_ITEMS];
        memset(items, 0, sizeof items);
        for (uint64_t i = 0; i < N_ITEMS; i++)
            GPT_RC(gpu_submit(p, items, i, WORDS), GP_OK);
        gpu_drain(p);
        for (size_t i = 0; i < N_ITEMS; i++)
            ok &= atomic_load(&items[i].calls) == 1 && atomic_load(&items[i].status) == GP_OK &&
                  atomic_load(&items[i].out_ok) == 1;
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gp_model_free(m);
    o->items_ok = ok;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

static int names_call(const char *err, const char *call) {
    return strstr(err, call) != NULL;
}

static void sweep(scenario *sc) {
    char held[512], now[512];
    long base = sim_live(held, sizeof held);
    float *out = NULL, *ref = NULL;
    size_t out_floats = 0;
    /* The unfaulted run: how many create calls a pipeline makes, and the reference. */
    outcome o;
    long calls = 0;
    sim_arm(0);
    try_once(sc, &o, &ref, &out_floats);
    sim_fired(&calls);
    if (o.rc != GP_OK || !o.items_ok) {
        fprintf(stderr, "%s: the unfaulted run failed: %s: %s\n", sc->name, gp_err_name(o.rc),
                o.err);
        exit(1);
    }
    GPT_CHECK(calls > 0);
    if (sim_live(now, sizeof now) != base || strcmp(now, held) != 0) {
        fprintf(stderr, "%s: the unfaulted run: held [%s] before, [%s] after\n", sc->name, held,
                now);
        exit(1);
    }
    int enomem = 0, recovered = 0;
    char recovered_by[512] = "";
    for (long n = 1;; n++) {
        sim_arm(n);
        try_once(sc, &o, &out, &out_floats);
        long seen = 0;
        const char *call = sim_fired(&seen);
        sim_arm(0);
        long live = sim_live(now, sizeof now);
        if (live != base || strcmp(now, held) != 0) {
            fprintf(stderr, "%s: failing create call %ld (%s): held [%s] before, [%s] after\n",
                    sc->name, n, call ? call : "none", held, now);
            exit(1);
        }
        if (!call) { /* past the last create call: a clean run */
            GPT_RC(o.rc, GP_OK);
            GPT_CHECK(o.items_ok);
            if (n <= calls)
                fprintf(stderr, "%s: armed at create call %ld, the run made %ld (unfaulted: %ld)\n",
                        sc->name, n, seen, calls);
            GPT_CHECK(n > calls);
            break;
        }
        if (o.rc == GP_OK) {
            /* A fallback: the items must still be right. */
            if (!o.items_ok) {
                fprintf(stderr, "%s: call %ld (%s) failed, create succeeded, items wrong\n",
                        sc->name, n, call);
                exit(1);
            }
            if (sc->load) {
                double e = rel_err(out, ref, N_ITEMS * out_floats);
                if (e > 1e-3) {
                    fprintf(stderr,
                            "%s: call %ld (%s) failed, create succeeded, outputs off by "
                            "%.3g\n",
                            sc->name, n, call, e);
                    exit(1);
                }
            }
            recovered++;
            if (!strstr(recovered_by, call) &&
                strlen(recovered_by) + strlen(call) + 3 < sizeof recovered_by)
                strcat(strcat(recovered_by, recovered_by[0] ? ", " : ""), call);
            continue;
        }
        if (o.rc != GP_ENOMEM || !o.err[0] || !names_call(o.err, call)) {
            fprintf(stderr,
                    "%s: call %ld (%s) failed: create gave %s: \"%s\" (want GP_ENOMEM "
                    "and a message naming the call)\n",
                    sc->name, n, call, gp_err_name(o.rc), o.err);
            exit(1);
        }
        if (n == 1 || n == calls)
            printf("  %s, call %ld (%s): %s: %.200s\n", sc->name, n, call, gp_err_name(o.rc),
                   o.err);
        enomem++;
    }
    printf("%s: %ld create calls; each failed in turn: %d gave GP_ENOMEM naming it, %d were "
           "survived (%s) with every item right; nothing leaked [%s]\n",
           sc->name, calls, enomem, recovered, recovered ? recovered_by : "-",
           held[0] ? held : "nothing held");
    free(out);
    free(ref);
}

static gp_model *load_model(const void *img, size_t len, const char *spec, gp_precision prec) {
    gp_model_options mo;
    gp_model_options_init(&mo);
    mo.spec_text = spec;
    mo.precision = prec;
    gp_model *m = NULL;
    char err[512] = "";
    int rc = gp_model_load_memory(img, len, &mo, &m, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "gp_model_load_memory: %s: %s\n", gp_err_name(rc), err);
        exit(1);
    }
    return m;
}

/* A demo model in fp16 (gp_model_demo_safetensors). */
static gp_model *demo_fp16(const char *name) {
    void *img = NULL;
    size_t len = 0;
    char err[256] = "";
    GPT_RC(gp_model_demo_safetensors(name, NULL, &img, &len, err, sizeof err), GP_OK);
    gp_model *m = load_model(img, len, NULL, GP_PRECISION_FP16);
    free(img);
    return m;
}
static gp_model *demo_mlp(void) {
    return demo_fp16("mlp");
}
static gp_model *demo_encoder(void) {
    return demo_fp16("encoder");
}

/* A small image model: u8 HWC in, cuDNN convolution, pooling, linear, softmax out. */
static gp_model *small_cnn(void) {
    static float cw[6 * 3 * 3 * 3], cb[6], fw[9 * 6], fb[9];
    for (size_t i = 0; i < sizeof cw / sizeof *cw; i++)
        cw[i] = (float)((int)(i * 37 % 19) - 9) / 30.0f;
    for (size_t i = 0; i < 6; i++)
        cb[i] = (float)i / 20.0f - 0.1f;
    for (size_t i = 0; i < sizeof fw / sizeof *fw; i++)
        fw[i] = (float)((int)(i * 53 % 23) - 11) / 10.0f;
    for (size_t i = 0; i < 9; i++)
        fb[i] = (float)i / 10.0f;
    gp__st_entry e[4] = {
        {.name = "c.weight", .dtype = GP__ST_F32, .rank = 4, .shape = {6, 3, 3, 3}, .data = cw},
        {.name = "c.bias", .dtype = GP__ST_F32, .rank = 1, .shape = {6}, .data = cb},
        {.name = "fc.weight", .dtype = GP__ST_F32, .rank = 2, .shape = {9, 6}, .data = fw},
        {.name = "fc.bias", .dtype = GP__ST_F32, .rank = 1, .shape = {9}, .data = fb},
    };
    void *img = NULL;
    size_t len = 0;
    char err[256] = "";
    GPT_RC(gp__st_build(e, 4, NULL, &img, &len, &(gp__err){err, sizeof err}), GP_OK);
    gp_model *m = load_model(img, len,
                             "input u8 8x8x3 layout=hwc mean=0.5 std=0.25\n"
                             "conv2d c padding=1\nrelu\nglobalavgpool\nflatten\nlinear fc\n"
                             "softmax\n",
                             GP_PRECISION_FP32);
    free(img);
    return m;
}

int main(void) {
    sim_arm = (arm_fn)dlsym(RTLD_DEFAULT, "gpsim_fault_arm");
    sim_fired = (fired_fn)dlsym(RTLD_DEFAULT, "gpsim_fault_fired");
    sim_live = (live_fn)dlsym(RTLD_DEFAULT, "gpsim_live");
    if (!sim_arm || !sim_fired || !sim_live) {
        fprintf(stderr, "test_fault_sweep needs gpsim preloaded (LD_PRELOAD=libgpsim.so)\n");
        return 1;
    }
    scenario sc[] = {
        {"transform kernel, eager", NULL, 0},
        {"transform kernel, cuda graphs", NULL, 1},
        {"demo mlp fp16, cuda graphs", demo_mlp, 1},
        {"u8 conv model fp32, cuda graphs", small_cnn, 1},
        {"demo encoder fp16, packed token batches", demo_encoder, 0},
    };
    /* The conv model's first slot times cuDNN's legacy algorithms and graph-API plans and keeps
       the fastest; its later slots plan only that one (conv.c's memo), so how many create calls
       they make depends on which won. The simulation runs both at the same cost, so load alone
       would decide, and a faulted run could make fewer calls than the unfaulted one. Every plan
       computing something else (GPSIM_DNN_GRAPH_WRONG) has conv.c's check pass them over:
       a legacy algorithm wins every time, and the plans' creation is still swept in slot 0. */
    if (setenv("GPSIM_DNN_GRAPH_WRONG", "1", 1) != 0) {
        perror("setenv");
        return 1;
    }
    for (size_t i = 0; i < sizeof sc / sizeof *sc; i++)
        sweep(&sc[i]);
    printf("ok\n");
    return 0;
}
