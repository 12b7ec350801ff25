// simdgroup_matrix<T, 8, 8>: an 8x8 matrix spread over the 32 lanes of a
// simdgroup, two elements per lane, in the hardware layout that MLX and
// metal-flash-attention rely on:
//
//   qid = lane / 4
//   row = (qid & 4) + (lane / 2) % 4
//   col = (qid & 2) * 2 + (lane % 2) * 2
//   thread_elements()[0] = (row, col), thread_elements()[1] = (row, col + 1)
//
// Loads and stores touch only the calling lane's two elements, so they need no
// synchronisation; multiply(-accumulate) gathers the three operands from all
// 32 lanes, computes in float and hands each lane its two results.
#pragma once

namespace metile_emu {

struct MatrixCoord {
  u32 row, col;
};

inline MatrixCoord matrix_coord(u32 lane) {
  u32 qid = lane / 4;
  return MatrixCoord{(qid & 4) + (lane / 2) % 4, (qid & 2) * 2 + (lane % 2) * 2};
}

struct MmaLaneInput {
  float a[2], b[2], c[2];
};

inline void mma_compute(SimdGroup& sg, u32 active) {
  if (active != 0xffffffffu)
    fail("simdgroup_matrix multiply with inactive lanes: all 32 lanes of the simdgroup must take part",
         sg.site);
#if METILE_EMU_PROFILE
  profile_count(pc_simdgroup_mma);
#endif
  float a[8][8], b[8][8], c[8][8];
  for (u32 lane = 0; lane < simd_width; ++lane) {
    MmaLaneInput in = load_slot<MmaLaneInput>(sg.lanes[lane].in);
    MatrixCoord at = matrix_coord(lane);
    for (u32 k = 0; k < 2; ++k) {
      a[at.row][at.col + k] = in.a[k];
      b[at.row][at.col + k] = in.b[k];
      c[at.row][at.col + k] = in.c[k];
    }
  }
  for (u32 lane = 0; lane < simd_width; ++lane) {
    MatrixCoord at = matrix_coord(lane);
    float d[2];
    for (u32 k = 0; k < 2; ++k) {
      float acc = c[at.row][at.col + k];
      for (u32 i = 0; i < 8; ++i) acc += a[at.row][i] * b[i][at.col + k];
      d[k] = acc;
    }
    store_slot(sg.lanes[lane].out, d);
  }
}

}  // namespace metile_emu

namespace metal {

template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the emulator supports 8x8 simdgroup matrices only");
  static_assert(metile_emu::is_same<T, float> || metile_emu::is_same<T, half> ||
                    metile_emu::is_same<T, bfloat>,
                "simdgroup_matrix element type must be float, half or bfloat");

  vec<T, 2> elements;

  simdgroup_matrix() = default;
  // Diagonal matrix with `diagonal` on the diagonal and zero elsewhere.
  simdgroup_matrix(T diagonal) {
    metile_emu::MatrixCoord at = metile_emu::matrix_coord(metile_emu::lane_index());
    for (metile_emu::u32 k = 0; k < 2; ++k)
      elements.e[k] = at.row == at.col + k ? diagonal : metile_emu::convert_scalar<T>(0.0f);
  }

  thread vec<T, 2>& thread_elements() { return elements; }
  const thread vec<T, 2>& thread_elements() const { return elements; }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.elements = vec<T, 2>(value);
  return m;
}

namespace detail {
// Offset of element (row, col) of the 8x8 matrix inside memory laid out with
// `elements_per_row`. With transpose the matrix is read column-major; the
// origin (x = column, y = row) is swapped the same way.
inline ulong matrix_offset(metile_emu::u32 row, metile_emu::u32 col, ulong elements_per_row, ulong2 origin,
                           bool transpose) {
  if (transpose) return (origin.x + col) * elements_per_row + origin.y + row;
  return (origin.y + row) * elements_per_row + origin.x + col;
}
}  // namespace detail

// A profiled build counts a matrix load or store as one access of the lane
// (both its elements) rather than as its element accesses (profile.h).
#if METILE_EMU_PROFILE
#define METILE_PROFILE_MATRIX(AS, pointer, write)                                                      \
  metile_emu::profile_matrix_access(                                                                  \
      (metile_emu::u64)&pointer[detail::matrix_offset(at.row, at.col, elements_per_row, matrix_origin,   \
                                                      transpose_matrix)] & metile_emu::address_mask,   \
      (metile_emu::u64)&pointer[detail::matrix_offset(at.row, at.col + 1, elements_per_row, matrix_origin, \
                                                      transpose_matrix)] & metile_emu::address_mask,   \
      sizeof(T), metile_emu::object_space<AS T> == 3, write);                                         \
  metile_emu::ProfileMute profile_mute;
#else
#define METILE_PROFILE_MATRIX(AS, pointer, write)
#endif

#define METILE_MATRIX_LOAD_STORE(AS)                                                                  \
  template <class T, int C, int R>                                                                    \
  inline void simdgroup_load(thread simdgroup_matrix<T, C, R>& d, const AS T* src,                     \
                             ulong elements_per_row = C, ulong2 matrix_origin = 0,                    \
                             bool transpose_matrix = false) {                                         \
    metile_emu::MatrixCoord at = metile_emu::matrix_coord(metile_emu::lane_index());                  \
    METILE_PROFILE_MATRIX(AS, src, false)                                                             \
    for (metile_emu::u32 k = 0; k < 2; ++k)                                                           \
      d.elements.e[k] =                                                                                \
          src[detail::matrix_offset(at.row, at.col + k, elements_per_row, matrix_origin, transpose_matrix)]; \
  }                                                                                                   \
  template <class T, int C, int R>                                                                    \
  inline void simdgroup_store(thread const simdgroup_matrix<T, C, R>& a, AS T* dst,                   \
                              ulong elements_per_row = C, ulong2 matrix_origin = 0,                   \
                              bool transpose_matrix = false) {                                        \
    metile_emu::MatrixCoord at = metile_emu::matrix_coord(metile_emu::lane_index());                  \
    METILE_PROFILE_MATRIX(AS, dst, true)                                                              \
    for (metile_emu::u32 k = 0; k < 2; ++k)                                                           \
      dst[detail::matrix_offset(at.row, at.col + k, elements_per_row, matrix_origin, transpose_matrix)] = \
          a.elements.e[k];                                                                            \
  }
METILE_MATRIX_LOAD_STORE(device)
METILE_MATRIX_LOAD_STORE(threadgroup)
#undef METILE_MATRIX_LOAD_STORE
#undef METILE_PROFILE_MATRIX

// d = a * b + c. Operand element types may differ (float accumulators with
// half or bfloat operands, as GGML uses); the product is computed in float.
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(thread simdgroup_matrix<TD, 8, 8>& d,
                                          thread const simdgroup_matrix<TA, 8, 8>& a,
                                          thread const simdgroup_matrix<TB, 8, 8>& b,
                                          thread const simdgroup_matrix<TC, 8, 8>& c,
                                          metile_emu::u32 site = METILE_SITE) {
  metile_emu::MmaLaneInput in;
  for (int k = 0; k < 2; ++k) {
    in.a[k] = metile_emu::to_float(a.elements.e[k]);
    in.b[k] = metile_emu::to_float(b.elements.e[k]);
    in.c[k] = metile_emu::to_float(c.elements.e[k]);
  }
  float out[2];
  metile_emu::simd_sync(&metile_emu::mma_compute, &in, sizeof(in), 0, out, sizeof(out), site);
  for (int k = 0; k < 2; ++k) d.elements.e[k] = metile_emu::convert_scalar<TD>(out[k]);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(thread simdgroup_matrix<TD, 8, 8>& d, thread const simdgroup_matrix<TA, 8, 8>& a,
                               thread const simdgroup_matrix<TB, 8, 8>& b, metile_emu::u32 site = METILE_SITE) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8>(metile_emu::convert_scalar<TD>(0.0f)),
                                site);
}

template <class T>
inline simdgroup_matrix<T, 8, 8> operator*(const simdgroup_matrix<T, 8, 8>& a, const simdgroup_matrix<T, 8, 8>& b) {
  simdgroup_matrix<T, 8, 8> d;
  simdgroup_multiply(d, a, b);
  return d;
}

}  // namespace metal
