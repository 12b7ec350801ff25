// Metal 4 tensor types, as far as meTile's kernels use them: execution scopes,
// extents and cooperative tensors.
//
// A cooperative tensor is a matrix spread over the lanes of its execution
// scope; each lane holds `get_capacity()` elements in private storage. Apple
// leaves the element-to-lane mapping to the device. The emulator uses the
// mapping MLX's NAX GEMMs assume for matmul2d's 16x16 fragments (an assumption
// taken from public code, not Apple documentation):
//
//   qid = lane / 4
//   element i < 8 of a 16x16 fragment:
//     row = ((qid & 4) | ((lane / 2) & 3)) + 8 * (i / 4)
//     col = ((qid & 2) | (lane & 1)) * 4 + i % 4
//
// A 16 x 16n operand is n fragments side by side: element i is element i % 8
// of the fragment of columns 16 * (i / 8) onwards. meTile's matmul2d atom
// (atoms.rs in metile-compiler) declares the same layout, so emitted kernels
// behave here as they would on a GPU that shares MLX's assumption.
#pragma once

namespace metile_emu {

inline MatrixCoord fragment16_coord(u32 lane, u32 i) {
  u32 qid = lane / 4;
  return MatrixCoord{((qid & 4) | ((lane / 2) & 3)) + 8 * (i / 4), ((qid & 2) | (lane & 1)) * 4 + i % 4};
}

// The lane layout of a Rows x Cols operand of matmul2d over one simdgroup.
template <u32 Rows, u32 Cols> struct fragment_layout {
  static_assert(Rows == 16 && Cols % 16 == 0, "the emulator lays out 16 x 16n cooperative tensors only");
  static constexpr u32 rows = Rows, cols = Cols;
  static constexpr u32 capacity = Rows * Cols / simd_width;
  static MatrixCoord coord(u32 lane, u32 i) {
    MatrixCoord at = fragment16_coord(lane, i % 8);
    at.col += 16 * (i / 8);
    return at;
  }
};

}  // namespace metile_emu

namespace metal {

template <class T> struct remove_addrspace {
  using type = T;
};
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;

// Execution scopes (MSL 4 specification, table 7.1).
struct execution_thread {};
template <int N> struct execution_simdgroups {
  static constexpr int simdgroups = N;
};
using execution_simdgroup = execution_simdgroups<1>;

// Static extents; dimension 0 is the innermost (a row-major matrix is
// extents<I, cols, rows>).
template <class I, I... E> struct extents {
  static constexpr size_t rank() { return sizeof...(E); }
  static constexpr I extent(size_t r) {
    constexpr I all[] = {E...};
    return all[r];
  }
};

template <class ElemType, class Extents, class Layout> struct cooperative_tensor {
  using value_type = ElemType;
  using extents_type = Extents;
  static constexpr metile_emu::u32 capacity = Layout::capacity;

  ElemType elements[capacity] = {};

  static constexpr metile_emu::u32 get_capacity() { return capacity; }

  thread ElemType& operator[](metile_emu::u32 i) {
    if (i >= capacity) metile_emu::fail("cooperative tensor element index out of range", 0);
    return elements[i];
  }
  const thread ElemType& operator[](metile_emu::u32 i) const {
    if (i >= capacity) metile_emu::fail("cooperative tensor element index out of range", 0);
    return elements[i];
  }
  ElemType get(metile_emu::u32 i) const { return (*this)[i]; }
  void set(metile_emu::u32 i, ElemType v) { (*this)[i] = v; }
};

}  // namespace metal
