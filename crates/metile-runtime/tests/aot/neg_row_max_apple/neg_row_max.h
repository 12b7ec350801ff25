/* meTile ahead-of-time artifact: kernel `neg_row_max` for apple (MSL 3.1).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: neg_row_max.metal (sha256 97b5399986028405b07c283740c3e6c43ce7fda2e4f1d133fe5af4d049ea5d2b). */
#ifndef METILE_AOT_NEG_ROW_MAX_H
#define METILE_AOT_NEG_ROW_MAX_H

#include <stdbool.h>
#include <stdint.h>

#define NEG_ROW_MAX_ENTRY_POINT "neg_row_max"
#define NEG_ROW_MAX_THREADS_PER_GROUP 32
#define NEG_ROW_MAX_SHARED_MEMORY_BYTES 0
#define NEG_ROW_MAX_BUFFER_ALIGNMENT 16
#define NEG_ROW_MAX_BLOCK 64 /* constexpr */

/* The run-time arguments, in launch order. */
typedef struct {
    const int32_t* X; /* i32 elements, read only; base aligned to 16 bytes */
    int32_t* Out; /* i32 elements, written; base aligned to 16 bytes */
    int32_t M; /* i32 */
    int32_t N; /* i32 */
} neg_row_max_args;

/* The grid rule "M" (C division). An extent outside 0..UINT32_MAX is an error the Rust runtime reports; check it here before launching. */
static inline void neg_row_max_grid(const neg_row_max_args* args, int64_t grid[3]) {
    (void)args;
    grid[0] = (int64_t)(args->M);
    grid[1] = INT64_C(1);
    grid[2] = INT64_C(1);
}

/* The compiled function's parameters, in declaration order:
 *   device const int* X at [[buffer(0)]]
 *   device int* Out at [[buffer(1)]]
 *   constant int& M at [[buffer(2)]]
 *   constant int& N at [[buffer(3)]]
 *   [[threadgroup_position_in_grid]] (set by Metal)
 *   [[thread_index_in_threadgroup]] (set by Metal)
 */

#endif /* METILE_AOT_NEG_ROW_MAX_H */
