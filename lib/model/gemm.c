/* Host GEMM (see gemm.h). Built with -O3 -ffp-contract=fast (lib/model/sources.cmake). On
   x86-64 the driver is compiled for the baseline ISA, AVX2+FMA and AVX-512, and picked per
   call from the CPU's features. (Not with target_clones: its ifunc resolver runs before the
   sanitizer runtimes are initialized and crashes under TSan.) */
#include "gemm.h"

#include <string.h>

/* Vector extensions (GCC, Clang): 8 floats; aligned(4) so loads need no alignment. */
typedef float gp__v8 __attribute__((vector_size(32), aligned(4)));

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GP__GEMM_AVX2 1
#endif

size_t gp__gemm_packed_elems(size_t M, size_t K) {
    return (M + GP__MR - 1) / GP__MR * GP__MR * K;
}

size_t gp__gemm_work_elems(void) {
    return (size_t)GP__KC * GP__NC;
}

void gp__gemm_pack_a(size_t M, size_t K, const float *A, size_t lda, float *Ap) {
    for (size_t p = 0; p * GP__MR < M; p++) {
        float *d = Ap + p * GP__MR * K;
        for (size_t k = 0; k < K; k++)
            for (size_t r = 0; r < GP__MR; r++) {
                size_t i = p * GP__MR + r;
                d[k * GP__MR + r] = i < M ? A[i * lda + k] : 0.0f;
            }
    }
}

/* B block (kc x nc at B) into NR-column panels: d[panel][k][j], zero columns past nc. */
static inline __attribute__((always_inline)) void pack_b(size_t kc, size_t nc, const float *B,
                                                         ptrdiff_t rsb, ptrdiff_t csb, float *d) {
    for (size_t jp = 0; jp < nc; jp += GP__NR) {
        size_t nr = nc - jp < GP__NR ? nc - jp : GP__NR;
        float *p = d + jp * kc;
        if (csb == 1) {
            for (size_t k = 0; k < kc; k++) {
                const float *s = B + (ptrdiff_t)k * rsb + (ptrdiff_t)jp;
                for (size_t j = 0; j < nr; j++)
                    p[k * GP__NR + j] = s[j];
                for (size_t j = nr; j < GP__NR; j++)
                    p[k * GP__NR + j] = 0.0f;
            }
        } else {
            for (size_t j = 0; j < GP__NR; j++) {
                if (j >= nr) {
                    for (size_t k = 0; k < kc; k++)
                        p[k * GP__NR + j] = 0.0f;
                    continue;
                }
                const float *s = B + (ptrdiff_t)(jp + j) * csb;
                for (size_t k = 0; k < kc; k++)
                    p[k * GP__NR + j] = s[(ptrdiff_t)k * rsb];
            }
        }
    }
}

/* MR x NR tile: acc = sum_k a[k][:] (x) b[k][:]. 12 vector accumulators. */
static inline __attribute__((always_inline)) void micro(size_t kc, const float *a, const float *b,
                                                        float acc[GP__MR][GP__NR]) {
    gp__v8 c[GP__MR][2];
    memset(c, 0, sizeof c);
    for (size_t k = 0; k < kc; k++) {
        gp__v8 b0 = *(const gp__v8 *)(b + k * GP__NR);
        gp__v8 b1 = *(const gp__v8 *)(b + k * GP__NR + 8);
        const float *ak = a + k * GP__MR;
        for (int i = 0; i < GP__MR; i++) { /* vector * scalar broadcasts the scalar */
            c[i][0] += b0 * ak[i];
            c[i][1] += b1 * ak[i];
        }
    }
    memcpy(acc, c, sizeof c);
}

static inline __attribute__((always_inline)) void store(float acc[GP__MR][GP__NR], size_t mr,
                                                        size_t nr, float *C, ptrdiff_t rsc,
                                                        ptrdiff_t csc, int first, int last,
                                                        const float *bias, gp__act act) {
    for (size_t i = 0; i < mr; i++) {
        float *row = C + (ptrdiff_t)i * rsc;
        float bi = bias ? bias[i] : 0.0f;
        for (size_t j = 0; j < nr; j++) {
            float v = acc[i][j];
            float *dst = row + (ptrdiff_t)j * csc;
            if (!first) v += *dst;
            if (last) v = gp__act_apply(act, v + bi);
            *dst = v;
        }
    }
}

#ifdef GP__GEMM_AVX2
/* AVX-512: two A panels (12 rows) against one 16-wide B vector per k, 12 accumulators. The
   arithmetic per element is the same FMA chain in k order as micro(), so results are bitwise
   the same whichever kernel a tile gets. */
typedef float gp__v16 __attribute__((vector_size(64), aligned(4)));

static inline __attribute__((always_inline)) void micro2(size_t kc, const float *a0,
                                                         const float *a1, const float *b,
                                                         float acc0[GP__MR][GP__NR],
                                                         float acc1[GP__MR][GP__NR]) {
    gp__v16 c0[GP__MR], c1[GP__MR];
    memset(c0, 0, sizeof c0);
    memset(c1, 0, sizeof c1);
    for (size_t k = 0; k < kc; k++) {
        gp__v16 bv = *(const gp__v16 *)(b + k * GP__NR);
        const float *x = a0 + k * GP__MR, *y = a1 + k * GP__MR;
        for (int i = 0; i < GP__MR; i++) {
            c0[i] += bv * x[i];
            c1[i] += bv * y[i];
        }
    }
    memcpy(acc0, c0, sizeof c0);
    memcpy(acc1, c1, sizeof c1);
}

__attribute__((target("avx512f,avx2,fma"))) static void
gemm_avx512(size_t M, size_t N, size_t K, const float *Ap, const float *B, ptrdiff_t rsb,
            ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc, const float *bias, gp__act act,
            float *work) {
    float acc[GP__MR][GP__NR], acc1[GP__MR][GP__NR];
    for (size_t jc = 0; jc < N; jc += GP__NC) {
        size_t nc = N - jc < GP__NC ? N - jc : GP__NC;
        for (size_t pc = 0; pc < K; pc += GP__KC) {
            size_t kc = K - pc < GP__KC ? K - pc : GP__KC;
            int first = pc == 0, last = pc + kc >= K;
            pack_b(kc, nc, B + (ptrdiff_t)pc * rsb + (ptrdiff_t)jc * csb, rsb, csb, work);
            for (size_t ip = 0; ip < M; ip += 2 * GP__MR) {
                const float *a = Ap + ip * K + pc * GP__MR;
                size_t mr = M - ip < GP__MR ? M - ip : GP__MR;
                size_t rest = M - ip - mr, mr1 = rest < GP__MR ? rest : GP__MR;
                for (size_t jp = 0; jp < nc; jp += GP__NR) {
                    size_t nr = nc - jp < GP__NR ? nc - jp : GP__NR;
                    float *c = C + (ptrdiff_t)ip * rsc + (ptrdiff_t)(jc + jp) * csc;
                    if (mr1) {
                        micro2(kc, a, a + GP__MR * K, work + jp * kc, acc, acc1);
                        store(acc1, mr1, nr, c + (ptrdiff_t)GP__MR * rsc, rsc, csc, first, last,
                              bias ? bias + ip + GP__MR : NULL, act);
                    } else {
                        micro(kc, a, work + jp * kc, acc);
                    }
                    store(acc, mr, nr, c, rsc, csc, first, last, bias ? bias + ip : NULL, act);
                }
            }
        }
    }
}
#endif

static inline __attribute__((always_inline)) void
gemm_body(size_t M, size_t N, size_t K, const float *Ap, const float *B, ptrdiff_t rsb,
          ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc, const float *bias, gp__act act,
          float *work) {
    float acc[GP__MR][GP__NR];
    for (size_t jc = 0; jc < N; jc += GP__NC) {
        size_t nc = N - jc < GP__NC ? N - jc : GP__NC;
        for (size_t pc = 0; pc < K; pc += GP__KC) {
            size_t kc = K - pc < GP__KC ? K - pc : GP__KC;
            int first = pc == 0, last = pc + kc >= K;
            pack_b(kc, nc, B + (ptrdiff_t)pc * rsb + (ptrdiff_t)jc * csb, rsb, csb, work);
            for (size_t ip = 0; ip < M; ip += GP__MR) {
                size_t mr = M - ip < GP__MR ? M - ip : GP__MR;
                const float *a = Ap + ip * K + pc * GP__MR;
                for (size_t jp = 0; jp < nc; jp += GP__NR) {
                    size_t nr = nc - jp < GP__NR ? nc - jp : GP__NR;
                    micro(kc, a, work + jp * kc, acc);
                    store(acc, mr, nr, C + (ptrdiff_t)ip * rsc + (ptrdiff_t)(jc + jp) * csc, rsc,
                          csc, first, last, bias ? bias + ip : NULL, act);
                }
            }
        }
    }
}

static void gemm_generic(size_t M, size_t N, size_t K, const float *Ap, const float *B,
                         ptrdiff_t rsb, ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc,
                         const float *bias, gp__act act, float *work) {
    gemm_body(M, N, K, Ap, B, rsb, csb, C, rsc, csc, bias, act, work);
}

#ifdef GP__GEMM_AVX2
__attribute__((target("avx2,fma"))) static void
gemm_avx2(size_t M, size_t N, size_t K, const float *Ap, const float *B, ptrdiff_t rsb,
          ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc, const float *bias, gp__act act,
          float *work) {
    gemm_body(M, N, K, Ap, B, rsb, csb, C, rsc, csc, bias, act, work);
}
#endif

void gp__gemm(size_t M, size_t N, size_t K, const float *Ap, const float *B, ptrdiff_t rsb,
              ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc, const float *bias, gp__act act,
              float *work) {
#ifdef GP__GEMM_AVX2
    /* libgcc / compiler-rt fill the feature bits in a constructor: a read, no state here */
    if (__builtin_cpu_supports("avx512f")) {
        gemm_avx512(M, N, K, Ap, B, rsb, csb, C, rsc, csc, bias, act, work);
        return;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        gemm_avx2(M, N, K, Ap, B, rsb, csb, C, rsc, csc, bias, act, work);
        return;
    }
#endif
    gemm_generic(M, N, K, Ap, B, rsb, csb, C, rsc, csc, bias, act, work);
}
