/* meTile ahead-of-time artifact: kernel `gemm` for apple (MSL 3.1).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: gemm.metal (sha256 7679ba35edb47b61f9e945c66eac5d5216340221084531b301039c4ff9c6e808). */
#ifndef METILE_AOT_GEMM_H
#define METILE_AOT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#define GEMM_ENTRY_POINT "gemm"
#define GEMM_THREADS_PER_GROUP 256
#define GEMM_SHARED_MEMORY_BYTES 9728
#define GEMM_BUFFER_ALIGNMENT 16
#define GEMM_BLOCK_M 64 /* constexpr */
#define GEMM_BLOCK_N 64 /* constexpr */
#define GEMM_BLOCK_K 32 /* constexpr */

/* The run-time arguments, in launch order. */
typedef struct {
    const uint16_t* A; /* f16 elements, read only; base aligned to 16 bytes */
    const uint16_t* B; /* f16 elements, read only; base aligned to 16 bytes */
    float* C; /* f32 elements, written; base aligned to 16 bytes */
    int32_t M; /* i32 */
    int32_t N; /* i32; a multiple of 16 */
    int32_t K; /* i32; a multiple of 16 */
} gemm_args;

/* The grid rule "cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)" (C division). An extent outside 0..UINT32_MAX is an error the Rust runtime reports; check it here before launching. */
static inline void gemm_grid(const gemm_args* args, int64_t grid[3]) {
    (void)args;
    grid[0] = (((int64_t)(args->M) + (int64_t)(GEMM_BLOCK_M) - 1) / (int64_t)(GEMM_BLOCK_M));
    grid[1] = (((int64_t)(args->N) + (int64_t)(GEMM_BLOCK_N) - 1) / (int64_t)(GEMM_BLOCK_N));
    grid[2] = INT64_C(1);
}

/* The compiled function's parameters, in declaration order:
 *   device const half* A at [[buffer(0)]]
 *   device const half* B at [[buffer(1)]]
 *   device float* C at [[buffer(2)]]
 *   constant int& M at [[buffer(3)]]
 *   constant int& N at [[buffer(4)]]
 *   constant int& K at [[buffer(5)]]
 *   threadgroup half* of 9728 bytes at [[threadgroup(0)]]
 *   [[threadgroup_position_in_grid]] (set by Metal)
 *   [[threadgroups_per_grid]] (set by Metal)
 *   [[thread_index_in_threadgroup]] (set by Metal)
 */

#endif /* METILE_AOT_GEMM_H */
