/* meTile ahead-of-time artifact: kernel `gemm` for sm_90 (CUDA C++ for sm_90a).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: gemm.cu (sha256 70d96b5c890815e09025da3859fff21cac0b0afa1350bdfb17bbff3297e7fd71). */
#ifndef METILE_AOT_GEMM_H
#define METILE_AOT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#define GEMM_ENTRY_POINT "gemm"
#define GEMM_THREADS_PER_GROUP 256
#define GEMM_SHARED_MEMORY_BYTES 98368
#define GEMM_BUFFER_ALIGNMENT 16
#define GEMM_BLOCK_M 128 /* constexpr */
#define GEMM_BLOCK_N 128 /* constexpr */
#define GEMM_BLOCK_K 64 /* constexpr */

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
 *   the device address of A
 *   the device address of B
 *   the device address of C
 *   M by value
 *   N by value
 *   K by value
 *   a CUtensorMap by value: A as a 2147483647 x K matrix of f16 (row stride K), boxes of 128 x 64, 128-byte swizzle
 *   an int: 1 when the tensor map of A was built, else 0
 *   a CUtensorMap by value: B as a 2147483647 x N matrix of f16 (row stride N), boxes of 64 x 64, 128-byte swizzle
 *   an int: 1 when the tensor map of B was built, else 0
 */

#endif /* METILE_AOT_GEMM_H */
