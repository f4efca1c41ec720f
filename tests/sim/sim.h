/*
 * gpsim's internal interface (docs/DESIGN.md §11): what the runtime (cudart_sim.c) shares with
 * the simulated libraries (libs_sim.c: cuBLAS, cuBLASLt, cuDNN) and the emulations of the model
 * runtime's kernels (kernels_sim.c). Nothing here is exported from the preloaded library: the
 * functions are hidden, so they never interpose on a symbol of the program under test.
 */
#ifndef GPSIM_SIM_H
#define GPSIM_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define SIM_API __attribute__((visibility("default")))
#define SIM_HIDDEN __attribute__((visibility("hidden")))
#define SIM_MAX_ARGS 192 /* bytes of a kernel's arguments kept per launch */

/* Kinds of tracked memory (bits in untrack's mask: 1 << kind). */
enum { MEM_DEVICE = 1, MEM_PINNED = 2, MEM_MAPPED = 3 };

typedef struct sim_op sim_op;

/* A kernel the program registered (or a library call's work, libs_sim.c), with its host
   emulation: 0, or a cudaError_t that loses the context (an illegal address, a trap). */
typedef struct sim_kernel {
    const void *stub;
    const char *name;
    int (*emu)(const sim_op *op);
} sim_kernel;

enum { OP_COPY, OP_SET, OP_KERNEL, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_GRAPH };

struct sim_op {
    int kind;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
    cudaEvent_t ev;
    uint64_t seq;
    const sim_kernel *k;
    dim3 grid, block;
    size_t shmem;
    unsigned char args[SIM_MAX_ARGS]; /* the kernel's parameters, laid out as CUDA lays them */
    cudaHostFn_t fn;
    void *user;
    struct sim_graph *graph;
    sim_op *next;
};

/* An emulation, chosen by the kernel's registered (mangled) name: `id` is the part that holds
   <length><name>, e.g. "16transform_kernel"; `args` spells the parameters, one letter each:
   p a pointer, z an 8-byte integer, i a 4-byte int or float, G 11 ints, C 15 ints (structs of
   ints passed by value). */
typedef struct sim_emu {
    const char *id;
    int (*emu)(const sim_op *);
    const char *args;
} sim_emu;

/* Storage types of the emulated data: the model runtime's gp__kt, u8 images, and token ids
   (i32 / i64, only sized: the embedding reads them as integers). */
typedef enum { SIM_F32, SIM_F16, SIM_BF16, SIM_U8, SIM_I32, SIM_I64 } sim_t;

static inline size_t sim_size(sim_t t) {
    return t == SIM_F32 || t == SIM_I32 ? 4 : t == SIM_U8 ? 1 : t == SIM_I64 ? 8 : 2;
}

/* Element i of a tensor of type t (a floating type or u8), as fp32 (the kernels' arithmetic
   type). */
static inline float sim_ld(sim_t t, const void *p, size_t i) {
    switch (t) {
    case SIM_U8:
        return (float)((const uint8_t *)p)[i];
    case SIM_F16:
        return (float)((const _Float16 *)p)[i];
    case SIM_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default:
        return ((const float *)p)[i];
    }
}

/* Store v as element i of a tensor of floating type t, rounded to nearest even
   (__float2half_rn, __float2bfloat16_rn). */
static inline void sim_st(sim_t t, void *p, size_t i, float v) {
    switch (t) {
    case SIM_F16:
        ((_Float16 *)p)[i] = (_Float16)v;
        break;
    case SIM_BF16: {
        uint32_t u;
        memcpy(&u, &v, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            u = (u | 0x00400000u) >> 16; /* NaN stays NaN (quiet) */
        else
            u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        ((uint16_t *)p)[i] = (uint16_t)u;
        break;
    }
    default:
        ((float *)p)[i] = v;
    }
}

/* A 2-D convolution's geometry, in the order of kernels/act.cu's conv_geom (a kernel argument). */
typedef struct sim_conv_geom {
    int Cin, H, W, Cout, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int nhwc; /* x, y N x H x W x C and w [Cout][kh][kw][Cin / groups] */
} sim_conv_geom;

/* Cross-correlation of n items (NCHW, type t) with w [Cout][Cin / groups][kh][kw] (nhwc: NHWC
   items, w [Cout][kh][kw][Cin / groups]): the fp32 sum for output element i (item, channel,
   row, column in the layout's order), the inputs rounded to tf32 first when tf32
   (kernels_sim.c; the direct kernel's and cuDNN's). sim_conv_co: output element i's channel.
   sim_conv_ok: every range it reads and out (n items) lie in device memory, and the geometry is
   whole. */
SIM_HIDDEN int sim_conv_ok(sim_t t, const sim_conv_geom *g, size_t n, const void *in, const void *w,
                           const void *out);
SIM_HIDDEN float sim_conv_at(sim_t t, const sim_conv_geom *g, const void *in, const void *w,
                             size_t i, int tf32);
SIM_HIDDEN int sim_conv_co(const sim_conv_geom *g, size_t i);
/* fp32 rounded to tf32 (10 mantissa bits, to nearest even), as tensor cores read it. */
SIM_HIDDEN float sim_tf32(float v);
/* The activations as the host applies them (lib/model/gemm.h gp__act_apply; 1 relu, 2 gelu,
   3 sigmoid, 4 tanh, else identity). */
SIM_HIDDEN float sim_act(int act, float x);

/* The model runtime's kernels (kernels_sim.c). */
SIM_HIDDEN extern const sim_emu sim_model_emus[];
SIM_HIDDEN extern const size_t sim_model_nemus;

/* The runtime's state, for the libraries. */
SIM_HIDDEN cudaError_t lost(void);                   /* the sticky error, or cudaSuccess */
SIM_HIDDEN int kind_of(const void *p, size_t bytes); /* MEM_* of [p, p + bytes), or 0 */
SIM_HIDDEN int dev_ok(const void *p, size_t bytes);  /* a range a kernel may touch */
SIM_HIDDEN cudaError_t enqueue(cudaStream_t st, const sim_op *tmpl); /* or into its capture */

/* The resource ledger and fault injection (cudart_sim.c; the tests reach them through the
   exported gpsim_fault_arm / gpsim_fault_fired / gpsim_live, found with dlsym). Every call
   that creates something the program must release asks sim_fault(name) first: 1 means this
   is the armed call, which then fails as an allocation failure would, creating nothing. A
   successful create counts +1 in the ledger, its destroy -1. */
enum {
    RES_DEV_MEM,
    RES_HOST_MEM,
    RES_STREAM,
    RES_EVENT,
    RES_GRAPH,
    RES_GRAPH_EXEC,
    RES_BLAS,
    RES_LT,
    RES_LT_DESC, /* matmul descriptors, matrix layouts, preferences */
    RES_DNN,
    RES_DNN_DESC, /* tensor, filter, convolution, activation descriptors */
    RES_DNN_BACKEND,
    RES_N
};
SIM_HIDDEN int sim_fault(const char *call);
SIM_HIDDEN void sim_res(int kind, int delta);
/* The exported test hooks (cudart_sim.c says what each does). */
SIM_API void gpsim_fault_arm(long n);
SIM_API const char *gpsim_fault_fired(long *seen);
SIM_API long gpsim_live(char *buf, size_t cap);

#endif
