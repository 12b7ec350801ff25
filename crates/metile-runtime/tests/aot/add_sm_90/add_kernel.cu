// meTile kernel `add_kernel`: 64 threads per block, 0 bytes of shared memory, for sm_90.

// MSL's scalar type names and bit cast, so the shared kernel body reads the same
// in both languages; `long` is 64 bits on the LP64 hosts NVRTC compiles for.
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
// MSL's `char` is signed; C++'s depends on the platform (unsigned on AArch64).
typedef signed char schar;
typedef unsigned long ulong;
static_assert(sizeof(long) == 8, "meTile's CUDA kernels need a 64-bit long");

template <typename T, typename F>
static __device__ __forceinline__ T as_type(F x) {
  static_assert(sizeof(T) == sizeof(F), "as_type needs types of one size");
  T r;
  memcpy(&r, &x, sizeof(T));
  return r;
}
// A vector of 2, 4 or 8 lanes aligned to its size, so a whole vector moves in
// one memory access (8 lanes: 16 bytes of a 2-byte type).
template <typename T, int N> struct metile_vec;
template <typename T> struct alignas(2 * sizeof(T)) metile_vec<T, 2> {
  T x, y;
  __device__ __forceinline__ metile_vec() {}
  __device__ __forceinline__ explicit metile_vec(T s) : x(s), y(s) {}
  __device__ __forceinline__ metile_vec(T a, T b) : x(a), y(b) {}
};
template <typename T> struct alignas(4 * sizeof(T)) metile_vec<T, 4> {
  T x, y, z, w;
  __device__ __forceinline__ metile_vec() {}
  __device__ __forceinline__ explicit metile_vec(T s) : x(s), y(s), z(s), w(s) {}
  __device__ __forceinline__ metile_vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
};
template <typename T> struct alignas(8 * sizeof(T)) metile_vec<T, 8> {
  T x, y, z, w, e4, e5, e6, e7;
  __device__ __forceinline__ metile_vec() {}
  __device__ __forceinline__ explicit metile_vec(T s) : x(s), y(s), z(s), w(s), e4(s), e5(s), e6(s), e7(s) {}
  __device__ __forceinline__ metile_vec(T a, T b, T c, T d, T e, T f, T g, T h)
      : x(a), y(b), z(c), w(d), e4(e), e5(f), e6(g), e7(h) {}
};

extern "C" __global__ void __launch_bounds__(64) add_kernel(
    const float* X,
    const float* Y,
    float* Out,
    int N) {
  const uint tid = threadIdx.x;
  const uint3 tgpig = blockIdx;
  float r0[4];
  float r1[4];
  int v7 = int(tgpig.x);
  int v9 = as_type<int>(as_type<uint>(v7) * 256u);
  int v10 = int(tid);
  int v12 = v10 * 4;
  int v19 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v12));
  bool v23 = v19 < N;
  int v14 = v12 + 1;
  int v20 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v14));
  bool v24 = v20 < N;
  bool v27 = v23 && v24;
  int v16 = v12 + 2;
  int v21 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v16));
  bool v25 = v21 < N;
  bool v28 = v27 && v25;
  int v18 = v12 + 3;
  int v22 = as_type<int>(as_type<uint>(v9) + as_type<uint>(v18));
  bool v26 = v22 < N;
  bool v29 = v28 && v26;
  if (v29) {
    metile_vec<float, 4> v30 = *((const metile_vec<float, 4>*)(X + v19));
    float v31 = v30.x;
    r0[0] = v31;
    float v32 = v30.y;
    r0[1] = v32;
    float v33 = v30.z;
    r0[2] = v33;
    float v34 = v30.w;
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
    metile_vec<float, 4> v46 = *((const metile_vec<float, 4>*)(Y + v19));
    float v47 = v46.x;
    r1[0] = v47;
    float v48 = v46.y;
    r1[1] = v48;
    float v49 = v46.z;
    r1[2] = v49;
    float v50 = v46.w;
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
  float v59 = v39 + v55;
  float v56 = r1[1];
  float v60 = v40 + v56;
  float v57 = r1[2];
  float v61 = v41 + v57;
  float v58 = r1[3];
  float v62 = v42 + v58;
  if (v29) {
    metile_vec<float, 4> v66 = metile_vec<float, 4>(v59, v60, v61, v62);
    *((metile_vec<float, 4>*)(Out + v19)) = v66;
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
