// mpp::tensor_ops::matmul2d (Metal Performance Primitives, MSL 4.0) over one
// simdgroup on cooperative tensors, the form meTile emits:
//
//   constexpr auto d = matmul2d_descriptor(16, 32, 16, false, false, true,
//                                          matmul2d_descriptor::mode::multiply_accumulate);
//   matmul2d<d, execution_simdgroup> op;
//   auto a = op.get_left_input_cooperative_tensor<half, half, float>();      // 16 x 16
//   auto b = op.get_right_input_cooperative_tensor<half, half, float>();     // 16 x 32
//   auto c = op.get_destination_cooperative_tensor<decltype(a), decltype(b), float>();
//   ... fill a, b, c element by element ...
//   op.run(a, b, c);  // c = a * b + c
//
// Other shapes, transposed operands and tensor (memory) operands are refused at
// compile time. The product is computed in float whatever the descriptor's
// relaxed_precision says: with half or bfloat operands each product is exact
// in float, so only the summation order can differ from a GPU.
//
// All 32 lanes must call run() (as on the GPU). Each lane publishes pointers to
// its three cooperative tensors; the last lane to arrive gathers the matrices
// from every lane's storage through them (the other lanes are suspended in
// run(), their tensors alive) and writes each lane's results back in place.
#pragma once

namespace mpp {
namespace tensor_ops {

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };

  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode matmul_mode;

  constexpr matmul2d_descriptor(int M, int N, int K = -1, bool transpose_left_ = false,
                                bool transpose_right_ = false, bool relaxed_precision_ = false,
                                mode matmul_mode_ = mode::multiply)
      : m(M),
        n(N),
        k(K),
        transpose_left(transpose_left_),
        transpose_right(transpose_right_),
        relaxed_precision(relaxed_precision_),
        matmul_mode(matmul_mode_) {}
};

}  // namespace tensor_ops
}  // namespace mpp

namespace metile_emu {

struct Matmul2dLaneInput {
  const void* a;
  const void* b;
  void* c;
};

template <class A, class B, class C, bool Accumulate> inline void matmul2d_compute(SimdGroup& sg, u32 active) {
  if (active != 0xffffffffu)
    fail("matmul2d with inactive lanes: all 32 lanes of the simdgroup must take part", sg.site);
#if METILE_EMU_PROFILE
  profile_count(pc_matmul2d_runs);
#endif
  using LA = fragment_layout<16, 16>;
  using LB = fragment_layout<16, 32>;
  float a[16][16], b[16][32], c[16][32];
  for (u32 lane = 0; lane < simd_width; ++lane) {
    Matmul2dLaneInput in = load_slot<Matmul2dLaneInput>(sg.lanes[lane].in);
    const A& ta = *static_cast<const A*>(in.a);
    const B& tb = *static_cast<const B*>(in.b);
    const C& tc = *static_cast<const C*>(in.c);
    for (u32 i = 0; i < LA::capacity; ++i) {
      MatrixCoord at = LA::coord(lane, i);
      a[at.row][at.col] = to_float(ta.elements[i]);
    }
    for (u32 i = 0; i < LB::capacity; ++i) {
      MatrixCoord at = LB::coord(lane, i);
      b[at.row][at.col] = to_float(tb.elements[i]);
      c[at.row][at.col] = Accumulate ? to_float(tc.elements[i]) : 0.0f;
    }
  }
  for (u32 lane = 0; lane < simd_width; ++lane) {
    Matmul2dLaneInput in = load_slot<Matmul2dLaneInput>(sg.lanes[lane].in);
    C& tc = *static_cast<C*>(in.c);
    for (u32 i = 0; i < LB::capacity; ++i) {
      MatrixCoord at = LB::coord(lane, i);
      float acc = c[at.row][at.col];
      for (u32 kk = 0; kk < 16; ++kk) acc += a[at.row][kk] * b[kk][at.col];
      tc.elements[i] = convert_scalar<typename C::value_type>(acc);
    }
  }
}

template <class T> inline constexpr bool is_matmul2d_operand = is_same<T, half> || is_same<T, bfloat_t>;

}  // namespace metile_emu

namespace mpp {
namespace tensor_ops {

template <matmul2d_descriptor Desc, class Scope> struct matmul2d {
  static_assert(metile_emu::is_same<Scope, metal::execution_simdgroup>,
                "the emulator runs matmul2d over one simdgroup (execution_simdgroup) only");
  static_assert(Desc.m == 16 && Desc.n == 32 && Desc.k == 16 && !Desc.transpose_left && !Desc.transpose_right,
                "the emulator implements matmul2d_descriptor(16, 32, 16, false, false, ...) only");

  template <class T> using left_t = metal::cooperative_tensor<T, metal::extents<int, 16, 16>, metile_emu::fragment_layout<16, 16>>;
  template <class T> using right_t = metal::cooperative_tensor<T, metal::extents<int, 32, 16>, metile_emu::fragment_layout<16, 32>>;

  template <class LeftT, class RightT, class DestT> left_t<LeftT> get_left_input_cooperative_tensor() const {
    static_assert(metile_emu::is_matmul2d_operand<LeftT>, "the emulator's matmul2d takes half or bfloat operands");
    return {};
  }
  template <class LeftT, class RightT, class DestT> right_t<RightT> get_right_input_cooperative_tensor() const {
    static_assert(metile_emu::is_matmul2d_operand<RightT>, "the emulator's matmul2d takes half or bfloat operands");
    return {};
  }
  template <class LeftTensor, class RightTensor, class DestT> right_t<DestT> get_destination_cooperative_tensor() const {
    static_assert(metile_emu::is_same<DestT, float>, "the emulator's matmul2d accumulates in float");
    return {};
  }

  template <class A, class B, class C>
  void run(thread const A& a, thread const B& b, thread C& c, metile_emu::u32 site = METILE_SITE) const {
    constexpr bool accumulate = Desc.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate;
    metile_emu::Matmul2dLaneInput in{&a, &b, &c};
    metile_emu::simd_sync(&metile_emu::matmul2d_compute<A, B, C, accumulate>, &in, sizeof(in), 0, nullptr, 0, site);
  }
};

}  // namespace tensor_ops
}  // namespace mpp
