/* meTile ahead-of-time artifact: kernel `add_kernel` for sm_90 (CUDA C++ for sm_90).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: add_kernel.cu (sha256 8435050815eb49bdbf82348d9c4b35ad05d3ca300a8f6f979f4f9f5deb6fedd5). */
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
 *   the device address of X
 *   the device address of Y
 *   the device address of Out
 *   N by value
 */

#endif /* METILE_AOT_ADD_KERNEL_H */
