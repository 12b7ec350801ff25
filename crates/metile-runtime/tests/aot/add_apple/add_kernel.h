/* meTile ahead-of-time artifact: kernel `add_kernel` for apple (MSL 3.1).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: add_kernel.metal (sha256 c7225a91f4cf85e8efd69fb0ff88366dddaf9004d320e79032d04ca76f58df1d). */
#ifndef METILE_AOT_ADD_KERNEL_H
#define METILE_AOT_ADD_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#define ADD_KERNEL_ENTRY_POINT "add_kernel"
#define ADD_KERNEL_THREADS_PER_GROUP 64
#define ADD_KERNEL_SHARED_MEMORY_BYTES 0
#define ADD_KERNEL_BUFFER_ALIGNMENT 16
#define ADD_KERNEL_BLOCK 256 /* constexpr */

/* The run-time arguments, in launch order. */
typedef struct {
    const float* X; /* f32 elements, read only; base aligned to 16 bytes */
    const float* Y; /* f32 elements, read only; base aligned to 16 bytes */
    float* Out; /* f32 elements, written; base aligned to 16 bytes */
    int32_t N; /* i32 */
} add_kernel_args;

/* The grid rule "cdiv(N, BLOCK)" (C division). An extent outside 0..UINT32_MAX is an error the Rust runtime reports; check it here before launching. */
static inline void add_kernel_grid(const add_kernel_args* args, int64_t grid[3]) {
    (void)args;
    grid[0] = (((int64_t)(args->N) + (int64_t)(ADD_KERNEL_BLOCK) - 1) / (int64_t)(ADD_KERNEL_BLOCK));
    grid[1] = INT64_C(1);
    grid[2] = INT64_C(1);
}

/* The compiled function's parameters, in declaration order:
 *   device const float* X at [[buffer(0)]]
 *   device const float* Y at [[buffer(1)]]
 *   device float* Out at [[buffer(2)]]
 *   constant int& N at [[buffer(3)]]
 *   [[threadgroup_position_in_grid]] (set by Metal)
 *   [[thread_index_in_threadgroup]] (set by Metal)
 */

#endif /* METILE_AOT_ADD_KERNEL_H */
