// meTile kernel `neg_row_max`: 32 threads per block, 0 bytes of shared memory, for sm_90.

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
// Warp reductions with MSL's simd_sum/simd_max/simd_min meaning: every lane gets
// the result (a butterfly: each lane combines the same values in the same order).
// The lowering uses them for f32/i32/u32 sums and i32/u32 max/min; integer sums wrap.
static __device__ __forceinline__ float metile_add(float a, float b) { return a + b; }
static __device__ __forceinline__ int metile_add(int a, int b) { return int(uint(a) + uint(b)); }
static __device__ __forceinline__ uint metile_add(uint a, uint b) { return a + b; }
template <typename T> static __device__ __forceinline__ T metile_max(T a, T b) { return a > b ? a : b; }
template <typename T> static __device__ __forceinline__ T metile_min(T a, T b) { return a < b ? a : b; }
template <typename T> static __device__ __forceinline__ T simd_sum(T x) {
  for (int m = 16; m > 0; m >>= 1) x = metile_add(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
template <typename T> static __device__ __forceinline__ T simd_max(T x) {
  for (int m = 16; m > 0; m >>= 1) x = metile_max(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
template <typename T> static __device__ __forceinline__ T simd_min(T x) {
  for (int m = 16; m > 0; m >>= 1) x = metile_min(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}

extern "C" __global__ void __launch_bounds__(32) neg_row_max(
    const int* X,
    int* Out,
    int M,
    int N,
    int p_metile_minus_one) {
  const uint tid = threadIdx.x;
  const uint3 tgpig = blockIdx;
  int v6 = int(tgpig.x);
  int v7 = as_type<int>(as_type<uint>(v6) * as_type<uint>(N));
  int v8 = int(tid);
  int v10 = v8 * 2;
  int v13 = as_type<int>(as_type<uint>(v7) + as_type<uint>(v10));
  bool v15 = v10 < N;
  int v17 = v15 ? int(X[v13]) : 0;
  int v20 = as_type<int>(as_type<uint>(v17) * as_type<uint>(p_metile_minus_one));
  int v23 = v15 ? v20 : (-2147483647 - 1);
  int v12 = v10 + 1;
  int v14 = as_type<int>(as_type<uint>(v7) + as_type<uint>(v12));
  bool v16 = v12 < N;
  int v18 = v16 ? int(X[v14]) : 0;
  int v21 = as_type<int>(as_type<uint>(v18) * as_type<uint>(p_metile_minus_one));
  int v24 = v16 ? v21 : (-2147483647 - 1);
  int v25 = v23 > v24 ? v23 : v24;
  int v26 = simd_max(v25);
  bool v29 = v8 == 0;
  if (v29) {
    Out[v6] = v26;
  }
}
