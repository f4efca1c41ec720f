/*
 * A convolution's cuDNN graph-API candidates (conv_graph.c), for conv.c: one bucket's forward
 * convolution as a one-operation graph (cudnnBackend*), the finalized plans of the heuristic's
 * engine configurations that the precision allows, and one variant pack for the slot's buffers;
 * bench/conv-bench's column (g) runs the same code. docs/DESIGN.md §6, "The graph API's
 * engines". Create thread only (plan, bind, release).
 */
#ifndef GP_CUDA_CONV_GRAPH_H
#define GP_CUDA_CONV_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#define GP__CGRAPH_MAX 8 /* conv.c: plans per bucket, the heuristic's first that qualify */

/* The most workspace a convolution may ask for, conv.c's rule (bench/conv-bench runs it too):
   1/16 of the device's free memory when the first slot on it plans, at least 256 MiB and at
   most 2 GiB. A fixed 256 MiB left out, at batch 256 on an H200, algorithms PyTorch's
   cudnn.benchmark can run with workspace from its caching allocator (fp32 WINOGRAD_NONFUSED at
   297 MiB, the NCHW tensor-core engines of a 3-channel stem in fp16; bench/RESULTS.md, third
   GPU run). docs/DESIGN.md §6. */
#define GP__CONV_WS_MIN ((size_t)256 << 20)
#define GP__CONV_WS_MAX ((size_t)2 << 30)
static inline size_t gp__conv_ws_cap(size_t free_bytes) {
    size_t cap = (free_bytes / 16) & ~(((size_t)1 << 20) - 1); /* whole MiB, as the memo */
    return cap < GP__CONV_WS_MIN ? GP__CONV_WS_MIN : cap > GP__CONV_WS_MAX ? GP__CONV_WS_MAX : cap;
}
#define GP__CGRAPH_OFFERED 64 /* configurations read from each heuristic mode */

typedef struct gp__cgraph gp__cgraph;

/* The convolution: n items of c x h x w into k x oh x ow, kernel kh x kw, groups; x, w and y
   packed NCHW, or NHWC (w then K x kh x kw x C) with nhwc. */
typedef struct gp__cgraph_geom {
    int64_t n, c, h, w, k, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int nhwc;
} gp__cgraph_geom;

/* One engine configuration the heuristic offered, as gp__cgraph_plan saw it (for a report:
   bench/conv-bench prints one line each). */
typedef struct gp__cgraph_seen {
    int fallback;      /* offered by the fallback list, not mode A */
    int index;         /* its place in that mode's list */
    long long engine;  /* global index; -1 when it could not be read */
    unsigned notes;    /* 1 << cudnnBackendNumericalNote_t */
    int runtime_built; /* CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION */
    int plan;          /* its plan's index in the graph, or -1 with `why` */
    size_t ws;         /* the plan's workspace, when one was finalized */
    int over_ws;       /* passed over for its workspace (why: "workspace over the cap") */
    const char *why;   /* "forbidden note", "no required note", "built at run time",
                          "workspace over the cap", "same plan as an earlier", "not reached in
                          time", "kept enough", or cuDNN's refusal */
} gp__cgraph_seen;

/* What gp__cgraph_plan takes: configurations whose notes avoid `forbid` (and, with `require`,
   include one of those: bench/conv-bench's (r), never conv.c) and whose workspace is at most
   ws_max, in the heuristic's order, mode A then (with fallback) the fallback list, told
   apart by their plan's JSON; up to max_plans of them (at most GP__CGRAPH_OFFERED) finalized
   within cap_ms of wall time; with only >= 0, the one at that position of that list alone (a
   memo's). seen, when set, is called for every configuration offered. */
typedef struct gp__cgraph_want {
    unsigned forbid, require;
    size_t ws_max;
    double cap_ms;
    int max_plans, only, fallback;
    int no_rtc; /* pass over engines built at run time (their finalizing can take seconds) */
    void (*seen)(void *user, const gp__cgraph_seen *s);
    void *user;
} gp__cgraph_want;

/* The engine notes a precision forbids (1 << cudnnBackendNumericalNote_t): always
   DOWN_CONVERT_INPUTS and REDUCED_PRECISION_REDUCTION (every storage type accumulates in fp32);
   fp32 (IEEE) also TENSOR_CORE and FFT. */
unsigned gp__cgraph_forbidden(int ieee_fp32);

/* Builds the graph for data type dt on handle h and finalizes the plans `w` asks for. Returns
   their number; 0 with why when there are none (cuDNN refused the graph, or nothing
   qualified): for conv.c the legacy candidates stand either way, so nothing here is an error.
   *out is NULL or the graph, which the caller frees. */
int gp__cgraph_plan(cudnnHandle_t h, cudnnDataType_t dt, const gp__cgraph_geom *g,
                    const gp__cgraph_want *w, gp__cgraph **out, char *why, size_t why_len);

int gp__cgraph_count(const gp__cgraph *g);
size_t gp__cgraph_ws(const gp__cgraph *g, int i);        /* plan i's workspace, bytes */
long long gp__cgraph_engine(const gp__cgraph *g, int i); /* its engine's global index */
int gp__cgraph_pos(const gp__cgraph *g, int i); /* its position in the qualifying list (memo) */

/* The variant pack every plan of the graph runs with: x, w, y and the workspace (NULL when no
   plan needs one). 0, or -1 with why. */
int gp__cgraph_bind(gp__cgraph *g, const void *x, const void *w, void *y, void *ws, char *why,
                    size_t why_len);

/* Plan i on h (its stream: the slot's), y = conv(x, w). */
cudnnStatus_t gp__cgraph_run(const gp__cgraph *g, cudnnHandle_t h, int i);

/* Destroys every plan but `keep` (-1: every one), which becomes plan 0. */
void gp__cgraph_keep(gp__cgraph *g, int keep);

void gp__cgraph_free(gp__cgraph *g);

#endif
