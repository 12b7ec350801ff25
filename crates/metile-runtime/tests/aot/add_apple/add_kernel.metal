#include <metal_stdlib>
using namespace metal;

// meTile kernel `add_kernel`: 64 threads per threadgroup.

kernel void add_kernel(
    device const float* X [[buffer(0)]],
    device const float* Y [[buffer(1)]],
    device float* Out [[buffer(2)]],
    constant int& N [[buffer(3)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]]) {
  float r0[4];
  float r1[4];
  int v7 = int(tgpig.x);
  int v9 = as_type<int>(as_type<uint>(v7) * 256u);
  int v10 = int(tid);
  int v12 = v10 * 4;
  int v14 = v12 + 1;
  int v16 = v12 + 2;
  int v18 = v12 + 3;
  int v19 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v12));
  int v20 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v14));
  int v21 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v16));
  int v22 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v18));
  bool v23 = v19 < N;
  bool v24 = v20 < N;
  bool v25 = v21 < N;
  bool v26 = v22 < N;
  bool v27 = v23 && v24;
  bool v28 = v27 && v25;
  bool v29 = v28 && v26;
  if (v29) {
    float4 v30 = *((device const float4*)(X + v19));
    float v31 = v30.x;
    float v32 = v30.y;
    float v33 = v30.z;
    float v34 = v30.w;
    r0[0] = v31;
    r0[1] = v32;
    r0[2] = v33;
    r0[3] = v34;
  } else {
    float v35 = v23 ? float(X[v19]) : 0.0f;
    r0[0] = v35;
    float v36 = v24 ? float(X[v20]) : 0.0f;
    r0[1] = v36;
    float v37 = v25 ? float(X[v21]) : 0.0f;
    r0[2] = v37;
    float v38 = v26 ? float(X[v22]) : 0.0f;
    r0[3] = v38;
  }
  float v39 = r0[0];
  float v40 = r0[1];
  float v41 = r0[2];
  float v42 = r0[3];
  if (v29) {
    float4 v46 = *((device const float4*)(Y + v19));
    float v47 = v46.x;
    float v48 = v46.y;
    float v49 = v46.z;
    float v50 = v46.w;
    r1[0] = v47;
    r1[1] = v48;
    r1[2] = v49;
    r1[3] = v50;
  } else {
    float v51 = v23 ? float(Y[v19]) : 0.0f;
    r1[0] = v51;
    float v52 = v24 ? float(Y[v20]) : 0.0f;
    r1[1] = v52;
    float v53 = v25 ? float(Y[v21]) : 0.0f;
    r1[2] = v53;
    float v54 = v26 ? float(Y[v22]) : 0.0f;
    r1[3] = v54;
  }
  float v55 = r1[0];
  float v56 = r1[1];
  float v57 = r1[2];
  float v58 = r1[3];
  float v59 = v39 + v55;
  float v60 = v40 + v56;
  float v61 = v41 + v57;
  float v62 = v42 + v58;
  if (v29) {
    float4 v66 = float4(v59, v60, v61, v62);
    *((device float4*)(Out + v19)) = v66;
  } else {
    if (v23) {
      Out[v19] = v59;
    }
    if (v24) {
      Out[v20] = v60;
    }
    if (v25) {
      Out[v21] = v61;
    }
    if (v26) {
      Out[v22] = v62;
    }
  }
}
