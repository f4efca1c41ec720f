/*
 * A convolution's cuDNN graph-API candidates (conv_graph.c), for conv.c: one bucket's forward
 * convolution as a one-operation graph (cudnnBackend*), the finalized plans of the heuristic's
 * engine configurations that the precision allows, and one variant pack for the slot's buffers.
 * docs/DESIGN.md §6, "The graph API's engines". Create thread only (plan, bind, release).
 */
#ifndef GP_CUDA_CONV_GRAPH_H
#define GP_CUDA_CONV_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#define GP__CGRAPH_MAX 8 /* plans kept per bucket, the heuristic's first that qualify */

typedef struct gp__cgraph gp__cgraph;

/* The convolution, NCHW: n items of c x h x w into k x oh x ow, kernel kh x kw, groups. */
typedef struct gp__cgraph_geom {
    int64_t n, c, h, w, k, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} gp__cgraph_geom;

/* The engine notes a precision forbids (1 << cudnnBackendNumericalNote_t): always
   DOWN_CONVERT_INPUTS and REDUCED_PRECISION_REDUCTION (every storage type accumulates in fp32);
   fp32 (IEEE) also TENSOR_CORE and FFT. */
unsigned gp__cgraph_forbidden(int ieee_fp32);

/* Builds the graph for data type dt on handle h and finalizes plans: the heuristic's (mode A)
   engine configurations in its order whose notes avoid `forbid` and whose workspace is at most
   ws_max, up to GP__CGRAPH_MAX of them and within cap_ms of wall time; with only >= 0, the
   one at that position of that filtered list alone (a memo's choice). Returns the number of
   plans; 0 with why when there are none (cuDNN refused the graph, or nothing qualified): the
   legacy candidates stand either way, so nothing here is an error. *out is NULL or the graph,
   which the caller frees. */
int gp__cgraph_plan(cudnnHandle_t h, cudnnDataType_t dt, const gp__cgraph_geom *g, unsigned forbid,
                    size_t ws_max, double cap_ms, int only, gp__cgraph **out, char *why,
                    size_t why_len);

int gp__cgraph_count(const gp__cgraph *g);
size_t gp__cgraph_ws(const gp__cgraph *g, int i);        /* plan i's workspace, bytes */
long long gp__cgraph_engine(const gp__cgraph *g, int i); /* its engine's global index */
int gp__cgraph_pos(const gp__cgraph *g, int i); /* its position in the filtered list (memo) */

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
