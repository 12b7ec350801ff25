// @section base
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
// @section f16
#include <cuda_fp16.h>
typedef __half half;
// @section bf16
#include <cuda_bf16.h>
typedef __nv_bfloat16 bfloat;
// @section vec
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
// @section narrow
// Two f32 values rounded to a pair of a 16-bit float type in one conversion.
template <typename T> static __device__ __forceinline__ metile_vec<T, 2> metile_narrow2(float a, float b);
// @section narrow_f16
template <> __device__ __forceinline__ metile_vec<half, 2> metile_narrow2<half>(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const metile_vec<half, 2>*>(&h);
}
// @section narrow_bf16
template <> __device__ __forceinline__ metile_vec<bfloat, 2> metile_narrow2<bfloat>(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const metile_vec<bfloat, 2>*>(&h);
}
// @section reduce
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
// @section mma_f16
// Two 16-bit fragment values in one 32-bit mma register, the first in the low half.
static __device__ __forceinline__ uint metile_pack2(half lo, half hi) {
  return uint(__half_as_ushort(lo)) | (uint(__half_as_ushort(hi)) << 16);
}
// @section mma_bf16
static __device__ __forceinline__ uint metile_pack2(bfloat lo, bfloat hi) {
  return uint(__bfloat16_as_ushort(lo)) | (uint(__bfloat16_as_ushort(hi)) << 16);
}
// @section mma_tf32
// An f32 rounded to tf32 (to nearest, ties away), as mma's tf32 operands expect.
static __device__ __forceinline__ uint metile_tf32(float x) {
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// @section wgmma
// A wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
// start address, leading and stride byte offsets in 16-byte units, swizzle mode.
static __device__ __forceinline__ unsigned long long metile_wgmma_desc(const void* p, uint lbo, uint sbo, uint mode) {
  const uint addr = uint(__cvta_generic_to_shared(p));
  return (unsigned long long)((addr & 0x3FFFF) >> 4)
       | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
       | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32)
       | ((unsigned long long)mode << 62);
}
// @section tma
// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), filled by
// the runtime's cuTensorMapEncodeTiled and passed as a __grid_constant__ parameter.
struct __align__(64) metile_tensor_map { unsigned long long opaque[16]; };
static __device__ __forceinline__ uint metile_smem_addr(const void* p) {
  return uint(__cvta_generic_to_shared(p));
}
// The barrier's phase 0 expects `count` arrivals; the initialisation is made
// visible to the other threads' and the tensor copies' accesses to it.
static __device__ __forceinline__ void metile_mbarrier_init(const void* bar, uint count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(metile_smem_addr(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
static __device__ __forceinline__ void metile_mbarrier_arrive(const void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(metile_smem_addr(bar)) : "memory");
}
static __device__ __forceinline__ void metile_mbarrier_arrive_expect_tx(const void* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(metile_smem_addr(bar)), "r"(bytes)
               : "memory");
}
static __device__ __forceinline__ void metile_mbarrier_wait(const void* bar, int parity) {
  uint done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(metile_smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
}
static __device__ __forceinline__ void metile_tma_load(void* dst, const metile_tensor_map* map, int col, int row,
                                                        const void* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(metile_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row),
                  "r"(metile_smem_addr(bar)) : "memory");
}
// @section tma_stacked
// The box at (row, col) of matrix `depth` of a stacked map (a third dimension).
static __device__ __forceinline__ void metile_tma_load_stacked(void* dst, const metile_tensor_map* map, int col,
                                                                int row, int depth, const void* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(metile_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row),
                  "r"(depth), "r"(metile_smem_addr(bar)) : "memory");
}
// @section release_counts
// One arrival on a count of the block's warps: acquire and release, so what
// the arriving warps did before is done for whoever sees the last count.
static __device__ __forceinline__ int metile_atomic_add(int* counts, int value) {
  int old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(metile_smem_addr(counts)), "r"(value)
               : "memory");
  return old;
}
