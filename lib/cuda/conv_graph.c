/*
 * A convolution as a cuDNN operation graph (the backend API PyTorch 2 reaches cuDNN through),
 * for conv.c's candidates: docs/DESIGN.md §6, "The graph API's engines". bench/conv-bench's (g)
 * times the same plans alone. Every call's status is checked; a refusal anywhere means "no
 * graph candidates" (the reason in why), never an error of the layer.
 */
#ifdef GP_HAVE_CUDNN
#include "conv_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clock.h"

#define CG_JSON_MAX 65536 /* a plan's JSON, for telling plans apart */
enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

typedef struct cg_plan_rec {
    cudnnBackendDescriptor_t plan;
    size_t ws;
    long long engine;
    int pos;
} cg_plan_rec;

struct gp__cgraph {
    cudnnBackendDescriptor_t xt, wt, yt, cv, op, og, pack;
    int n;
    cg_plan_rec p[]; /* want->max_plans */
};

/* The handle attributes are deprecated since cuDNN 9.8 (a device-property descriptor may stand
   in); they still work, and cuDNN 9 before 9.8 has nothing else. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const cudnnBackendAttributeName_t CG_GRAPH_HANDLE = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
static const cudnnBackendAttributeName_t CG_PLAN_HANDLE = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

/* A failed call: its attribute (or the call with its first argument: which descriptor a
   Finalize refused), its status and cuDNN's own reason (cudnnGetLastErrorString, cuDNN 9). */
static void cg_fail(char *why, size_t why_len, const char *call, cudnnStatus_t s) {
    const char *attr = strstr(call, "CUDNN_ATTR_");
    const char *fn = attr ? attr : call;
    int len = (int)strcspn(fn, attr ? ", )" : ",)");
    char last[256] = "";
#if CUDNN_MAJOR >= 9
    cudnnGetLastErrorString(last, sizeof last);
#endif
    snprintf(why, why_len, "cuDNN graph API: %.*s%s: %s%s%s", len, fn, attr ? "" : ")",
             cudnnGetErrorString(s), last[0] ? ": " : "", last);
}

/* cuDNN keeps a thread's last message until it is read: one an earlier call left (a legacy
   call conv.c lets fail, as the fused trial) is not a later graph call's reason (cg_fail). */
static void cg_drain_reason(void) {
#if CUDNN_MAJOR >= 9
    char stale[256];
    cudnnGetLastErrorString(stale, sizeof stale);
#endif
}

#define CG(call)                                                                                   \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
            cg_fail(why, why_len, #call, s_);                                                      \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

/* CG, in a function that must clean up: why set, then to its `out` label. */
#define CG_OUT(call)                                                                               \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
            cg_fail(why, why_len, #call, s_);                                                      \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static void cg_destroy(cudnnBackendDescriptor_t *d) {
    if (*d) (void)cudnnBackendDestroyDescriptor(*d); /* not actionable in teardown */
    *d = NULL;
}

unsigned gp__cgraph_forbidden(int ieee_fp32) {
    unsigned f = 1u << CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS |
                 1u << CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
    if (ieee_fp32) f |= 1u << CUDNN_NUMERICAL_NOTE_TENSOR_CORE | 1u << CUDNN_NUMERICAL_NOTE_FFT;
    return f;
}

/* A packed tensor of dimensions N, C, H, W: NCHW, or NHWC. */
static int cg_tensor(cudnnBackendDescriptor_t *t, cudnnDataType_t dt, const int64_t dim[4],
                     int nhwc, int64_t uid, char *why, size_t why_len) {
    const int64_t c = dim[1], h = dim[2], w = dim[3], align = 16;
    const int64_t str[4] = {c * h * w, nhwc ? 1 : h * w, nhwc ? w * c : w, nhwc ? c : 1};
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    CG(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CG(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    CG(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CG(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CG(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CG(cudnnBackendFinalize(*t));
    return 0;
}

/* y = conv(x, w): cross-correlation, fp32 compute (conv.c's conv_desc). */
static int cg_build(gp__cgraph *cg, cudnnHandle_t h, cudnnDataType_t dt, const gp__cgraph_geom *g,
                    char *why, size_t why_len) {
    const int64_t xd[4] = {g->n, g->c, g->h, g->w}, wd[4] = {g->k, g->c / g->groups, g->kh, g->kw},
                  yd[4] = {g->n, g->k, g->oh, g->ow};
    const int64_t two = 2, dil[2] = {g->dh, g->dw}, str[2] = {g->sh, g->sw},
                  pad[2] = {g->ph, g->pw};
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const float one = 1.0f, zero = 0.0f;
    if (cg_tensor(&cg->xt, dt, xd, g->nhwc, UID_X, why, why_len) ||
        cg_tensor(&cg->wt, dt, wd, g->nhwc, UID_W, why, why_len) ||
        cg_tensor(&cg->yt, dt, yd, g->nhwc, UID_Y, why, why_len))
        return -1;
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &cg->cv));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                                &comp));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                                &two));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2,
                                dil));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2,
                                str));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2,
                                pad));
    CG(cudnnBackendSetAttribute(cg->cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2,
                                pad));
    CG(cudnnBackendFinalize(cg->cv));
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                    &cg->op));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->xt));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->wt));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->yt));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->cv));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                CUDNN_TYPE_FLOAT, 1, &one));
    CG(cudnnBackendSetAttribute(cg->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                CUDNN_TYPE_FLOAT, 1, &zero));
    CG(cudnnBackendFinalize(cg->op));
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &cg->og));
    CG(cudnnBackendSetAttribute(cg->og, CG_GRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CG(cudnnBackendSetAttribute(cg->og, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->op));
    CG(cudnnBackendFinalize(cg->og));
    return 0;
}

/* The heuristic's engine configurations in `mode`, at most max, into ecs (created here; the
   caller destroys them). How many, or -1 with why. */
static int cg_configs(const gp__cgraph *cg, cudnnBackendHeurMode_t mode,
                      cudnnBackendDescriptor_t *ecs, int max, char *why, size_t why_len) {
    cudnnBackendDescriptor_t heur = NULL;
    int64_t n = 0, got = 0;
    int made = 0, rc = -1;
    CG_OUT(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CG_OUT(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cg->og));
    CG_OUT(
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CG_OUT(cudnnBackendFinalize(heur));
    /* the count first (no array), then that many configurations, created beforehand */
    CG_OUT(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
    if (n > max) n = max;
    for (; made < (int)n; made++)
        CG_OUT(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &ecs[made]));
    if (n > 0)
        CG_OUT(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, ecs));
    if (got > n) got = n;
    if (got < 0) got = 0;
    rc = (int)got;
out:
    for (int i = rc < 0 ? 0 : rc; i < made; i++) /* on failure all, else those not filled */
        cg_destroy(&ecs[i]);
    cg_destroy(&heur);
    return rc;
}

/* An engine configuration's engine: its global index, numerical notes (1 << note) and whether
   it is built at run time. */
static int cg_engine(cudnnBackendDescriptor_t ec, long long *index, unsigned *notes, int *rtc,
                     char *why, size_t why_len) {
    cudnnBackendDescriptor_t eng = NULL;
    cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t got = 0, idx = -1;
    int rc = -1;
    *notes = 0;
    *rtc = 0;
    CG_OUT(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CG_OUT(cudnnBackendGetAttribute(ec, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    1, &got, &eng));
    CG_OUT(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                                    &idx));
    CG_OUT(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                    CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                    &got, nn));
    for (int64_t i = 0; i < got && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if ((unsigned)nn[i] < 32) *notes |= 1u << nn[i];
    CG_OUT(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                    CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got, bn));
    for (int64_t i = 0; i < got && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
        *rtc |= bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    *index = (long long)idx;
    rc = 0;
out:
    cg_destroy(&eng);
    return rc;
}

/* A finalized plan of ec, its workspace and a hash of its JSON (0 when cuDNN gives none). */
static int cg_plan(cudnnHandle_t h, cudnnBackendDescriptor_t ec, cudnnBackendDescriptor_t *plan,
                   size_t *ws, uint64_t *hash, char *json, char *why, size_t why_len) {
    int64_t got = 0, bytes = 0;
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
    CG(cudnnBackendSetAttribute(*plan, CG_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CG(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ec));
    CG(cudnnBackendFinalize(*plan));
    CG(cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                1, &got, &bytes));
    *ws = bytes < 0 ? 0 : (size_t)bytes;
    *hash = 0;
    got = 0;
    if (cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, CG_JSON_MAX, &got,
                                 json) == CUDNN_STATUS_SUCCESS &&
        got > 0 && got < CG_JSON_MAX) {       /* longer (perhaps cut): no hash */
        uint64_t x = 14695981039346656037ull; /* FNV-1a */
        for (int64_t i = 0; i < got && json[i]; i++)
            x = (x ^ (unsigned char)json[i]) * 1099511628211ull;
        *hash = x;
    }
    return 0;
}

int gp__cgraph_plan(cudnnHandle_t h, cudnnDataType_t dt, const gp__cgraph_geom *g,
                    const gp__cgraph_want *w, gp__cgraph **out, char *why, size_t why_len) {
    uint64_t t0 = gp__now_ns();
    if (why_len) why[0] = '\0';
    cg_drain_reason();
    const int max_plans = w->max_plans < 1                    ? 1
                          : w->max_plans > GP__CGRAPH_OFFERED ? GP__CGRAPH_OFFERED
                                                              : w->max_plans;
    cudnnBackendDescriptor_t ecs[GP__CGRAPH_OFFERED];
    uint64_t seen[2 * GP__CGRAPH_OFFERED];
    int n_seen = 0, pos = 0, offered = 0, late = 0, refused = 0;
    char first_refusal[320] = "";
    char *json = malloc(CG_JSON_MAX);
    gp__cgraph *cg = calloc(1, sizeof *cg + (size_t)max_plans * sizeof cg->p[0]);
    *out = cg;
    if (!cg || !json) {
        snprintf(why, why_len, "out of memory for the cuDNN graph");
        free(json);
        return 0;
    }
    if (cg_build(cg, h, dt, g, why, why_len) != 0) {
        free(json);
        return 0;
    }
    for (int m = 0; m < (w->fallback ? 2 : 1); m++) {
        /* The fallback list only when mode A left room (or the memo's position unreached). */
        if (m && (cg->n == max_plans || (w->only >= 0 && pos > w->only))) break;
        int n = cg_configs(cg, m ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A, ecs,
                           GP__CGRAPH_OFFERED, why, why_len);
        /* The cap bounds finalizing: a process's first heuristic query loads cuDNN's
           heuristic library (a quarter second and more), which is not the engines' cost. */
        if (m == 0) t0 = gp__now_ns();
        for (int i = 0; i < n; i++) {
            gp__cgraph_seen sn = {.fallback = m, .index = i, .engine = -1, .plan = -1};
            char w2[320] = "";
            cudnnBackendDescriptor_t plan = NULL;
            uint64_t hash = 0;
            offered++;
            if (cg->n == max_plans || (w->only >= 0 && pos > w->only)) {
                sn.why = "kept enough";
            } else if (w->only < 0 && (double)(gp__now_ns() - t0) / 1e6 > w->cap_ms) {
                sn.why = "not reached in time";
                late++;
            } else if (cg_engine(ecs[i], &sn.engine, &sn.notes, &sn.runtime_built, w2, sizeof w2) !=
                       0) {
                sn.why = w2;
                if (!refused++) snprintf(first_refusal, sizeof first_refusal, "%s", w2);
            } else if (sn.notes & w->forbid) {
                sn.why = "forbidden note";
            } else if (w->require && !(sn.notes & w->require)) {
                sn.why = "no required note";
            } else if (w->no_rtc && sn.runtime_built) {
                sn.why = "built at run time";
            } else if (cg_plan(h, ecs[i], &plan, &sn.ws, &hash, json, w2, sizeof w2) != 0) {
                sn.why = w2;
                if (!refused++) snprintf(first_refusal, sizeof first_refusal, "%s", w2);
            } else {
                /* Told apart before the cap, so a plan both lists offer counts once. */
                int dup = 0;
                for (int j = 0; j < n_seen && hash; j++)
                    dup |= seen[j] == hash;
                if (!dup && hash) seen[n_seen++] = hash;
                if (dup) {
                    sn.why = "same plan as an earlier";
                } else if (sn.ws > w->ws_max) {
                    sn.why = "workspace over the cap";
                    sn.over_ws = 1;
                } else {
                    if (w->only < 0 || pos == w->only) {
                        cg->p[cg->n] = (cg_plan_rec){plan, sn.ws, sn.engine, pos};
                        sn.plan = cg->n++;
                        plan = NULL;
                    } else {
                        sn.why = "not the memo's";
                    }
                    pos++;
                }
            }
            if (w->seen) w->seen(w->user, &sn);
            cg_destroy(&plan);
            cg_destroy(&ecs[i]);
        }
    }
    free(json);
    if (offered == 0 && !why[0]) snprintf(why, why_len, "cuDNN's graph heuristic offers no engine");
    if (offered > 0 && cg->n == 0)
        snprintf(why, why_len,
                 "none of %d engine configurations qualified (%d not reached within %.0f ms, "
                 "%d refused%s%s)",
                 offered, late, w->cap_ms, refused, refused ? ", the first: " : "", first_refusal);
    return cg->n;
}

int gp__cgraph_count(const gp__cgraph *g) {
    return g ? g->n : 0;
}
size_t gp__cgraph_ws(const gp__cgraph *g, int i) {
    return g->p[i].ws;
}
long long gp__cgraph_engine(const gp__cgraph *g, int i) {
    return g->p[i].engine;
}
int gp__cgraph_pos(const gp__cgraph *g, int i) {
    return g->p[i].pos;
}

int gp__cgraph_bind(gp__cgraph *g, const void *x, const void *w, void *y, void *ws, char *why,
                    size_t why_len) {
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)(uintptr_t)x, (void *)(uintptr_t)w, y};
    cg_drain_reason();
    cg_destroy(&g->pack);
    CG(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &g->pack));
    CG(cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                                uids));
    CG(cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                3, ptrs));
    CG(cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                &ws));
    CG(cudnnBackendFinalize(g->pack));
    return 0;
}

cudnnStatus_t gp__cgraph_run(const gp__cgraph *g, cudnnHandle_t h, int i) {
    if (!g || i < 0 || i >= g->n || !g->pack) return CUDNN_STATUS_BAD_PARAM;
    return cudnnBackendExecute(h, g->p[i].plan, g->pack);
}

void gp__cgraph_keep(gp__cgraph *g, int keep) {
    if (!g) return;
    int k = 0;
    for (int i = 0; i < g->n; i++) {
        if (i != keep)
            cg_destroy(&g->p[i].plan);
        else
            g->p[k++] = g->p[i];
    }
    g->n = k;
}

void gp__cgraph_free(gp__cgraph *g) {
    if (!g) return;
    gp__cgraph_keep(g, -1);
    cg_destroy(&g->pack);
    cg_destroy(&g->og);
    cg_destroy(&g->op);
    cg_destroy(&g->cv);
    cg_destroy(&g->yt);
    cg_destroy(&g->wt);
    cg_destroy(&g->xt);
    free(g);
}
#else
typedef int gp__conv_graph_unused; /* a build without cuDNN: nothing here (ISO C: not empty) */
#endif
