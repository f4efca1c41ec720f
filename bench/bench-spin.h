/*
 * cuda-bench's spin kernel (bench/bench-spin.cu): a kernel of known wall duration that can stamp
 * when it really ran, read from the GPU's %globaltimer (nanoseconds) by the kernel itself.
 * Bench-only: the library does not ship it.
 */
#ifndef GP_BENCH_SPIN_H
#define GP_BENCH_SPIN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Where one launch stamps its execution interval, in device memory, zeroed before first use:
 * start = the earliest block's first %globaltimer read, end = the latest block's last read.
 * Each key packs a generation (upper 24 bits) with a time relative to a base (lower 40 bits,
 * ~1100 s), so that blocks combine with one atomicMax each and a record reused for a later
 * launch (higher generation) needs no reset between launches:
 *   start_key = gen << 40 | (BENCH_SPIN_TMASK - (t - base))   (max = latest gen, earliest t)
 *   end_key   = gen << 40 | (t - base)                        (max = latest gen, latest t)
 */
typedef struct bench_spin_stamp {
    unsigned long long start_key, end_key;
} bench_spin_stamp;

#define BENCH_SPIN_TBITS 40
#define BENCH_SPIN_TMASK ((1ull << BENCH_SPIN_TBITS) - 1)
#define BENCH_SPIN_GENMAX ((1u << 24) - 1)

/*
 * Enqueue on `stream` a kernel that runs `ns` nanoseconds of wall time per block. Each block
 * spins on clock64() in short rounds and checks %globaltimer between rounds (clock64 counts SM
 * cycles, whose rate moves with boost and throttling).
 *
 * exclusive == 0: one warp; kernels of several streams may run side by side.
 * exclusive != 0: one block per SM, each holding more than half of the SM's shared memory,
 * so no two exclusive spin kernels share an SM: they serialize like kernels that fill the GPU
 * (the compute-bound case).
 *
 * stamp: NULL, or a device pointer to this launch's record; gen: 1..BENCH_SPIN_GENMAX, higher
 * than any earlier launch's on the same record; base_ns: a %globaltimer value read before
 * (bench_timer_now), times are stored relative to it.
 *
 * Returns the launch's cudaError_t. Any thread; the device of `stream` must be current.
 */
cudaError_t bench_spin_launch(cudaStream_t stream, uint64_t ns, int exclusive,
                              bench_spin_stamp *stamp, uint32_t gen, uint64_t base_ns);

/* Enqueue a one-thread kernel that stores %globaltimer at *dst (device pointer; mapped host
   memory for the host to poll) and fences it to system scope. Returns the cudaError_t. */
cudaError_t bench_timer_now(cudaStream_t stream, unsigned long long *dst);

/* Decode a record written by the launch of generation `gen`: 1 with *start / *end in
   %globaltimer nanoseconds, or 0 when the record holds another launch (or none). */
static inline int bench_spin_decode(const bench_spin_stamp *s, uint32_t gen, uint64_t base_ns,
                                    uint64_t *start, uint64_t *end) {
    if ((s->start_key >> BENCH_SPIN_TBITS) != gen || (s->end_key >> BENCH_SPIN_TBITS) != gen)
        return 0;
    *start = base_ns + (BENCH_SPIN_TMASK - (s->start_key & BENCH_SPIN_TMASK));
    *end = base_ns + (s->end_key & BENCH_SPIN_TMASK);
    return *end >= *start;
}

#ifdef __cplusplus
}
#endif
#endif
