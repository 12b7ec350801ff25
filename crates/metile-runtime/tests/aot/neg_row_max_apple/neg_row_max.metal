#include <metal_stdlib>
using namespace metal;

// meTile kernel `neg_row_max`: 32 threads per threadgroup.

kernel void neg_row_max(
    device const int* X [[buffer(0)]],
    device int* Out [[buffer(1)]],
    constant int& M [[buffer(2)]],
    constant int& N [[buffer(3)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]]) {
  int v6 = int(tgpig.x);
  int v7 = as_type<int>(as_type<uint>(v6) * as_type<uint>(N));
  int v8 = int(tid);
  int v10 = v8 * 2;
  int v12 = v10 + 1;
  int v13 = as_type<int>(as_type<uint>(v7) + as_type<uint>(v10));
  int v14 = as_type<int>(as_type<uint>(v7) + as_type<uint>(v12));
  bool v15 = v10 < N;
  bool v16 = v12 < N;
  int v17 = v15 ? int(X[v13]) : 0;
  int v18 = v16 ? int(X[v14]) : 0;
  int v19 = as_type<int>(uint(0) - as_type<uint>(v17));
  int v20 = as_type<int>(uint(0) - as_type<uint>(v18));
  int v22 = v15 ? v19 : (-2147483647 - 1);
  int v23 = v16 ? v20 : (-2147483647 - 1);
  int v24 = v22 > v23 ? v22 : v23;
  int v25 = simd_max(v24);
  bool v28 = v8 == 0;
  if (v28) {
    Out[v6] = v25;
  }
}
