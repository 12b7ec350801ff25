/* meTile ahead-of-time artifact: kernel `neg_row_max` for sm_90 (CUDA C++ for sm_90).
 * Written by `python -m metile compile`; manifest.json describes the same in full.
 * Source: neg_row_max.cu (sha256 37c53b21e0f00a232a5b1768c96f67267bebac2850f97a7d18a850abdf1245e2). */
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
 *   the device address of X
 *   the device address of Out
 *   M by value
 *   N by value
 *   an int holding -1
 */

#endif /* METILE_AOT_NEG_ROW_MAX_H */
