/*
 * A kernel of known duration, for GPU tests and benchmarks: it keeps the device busy for a
 * given wall time, so overlap and busy fractions can be checked against a number.
 */
#ifndef GP_KERNELS_SPIN_H
#define GP_KERNELS_SPIN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enqueue on `stream` a kernel that runs ns_per_batch + n * ns_per_item nanoseconds of wall
 * time (plus launch latency). Each block spins on clock64() in short rounds and checks the
 * global nanosecond timer between rounds: clock64 counts SM cycles, whose rate moves with
 * boost and throttling, so the timer decides when to stop.
 *
 * exclusive == 0: one warp; kernels of several streams may run side by side.
 * exclusive != 0: one block per SM, each holding more than half of the SM's shared memory,
 * so no two exclusive spin kernels are resident at once: they serialize like kernels that
 * fill the GPU (the compute-bound case). Queries the current device's attributes per call.
 *
 * Returns the launch's cudaError_t (cudaSuccess once enqueued). Any thread; the device of
 * `stream` must be current.
 */
cudaError_t gp__spin_launch(cudaStream_t stream, uint64_t ns_per_batch, uint64_t ns_per_item,
                            size_t n, int exclusive);

#ifdef __cplusplus
}
#endif
#endif
