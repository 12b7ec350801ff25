// SIMD-group functions with 32-lane semantics.
//
// Only live lanes take part: a lane whose thread has returned is inactive.
// Reading from an inactive lane (undefined on the GPU) yields the reading
// lane's own value, the same rule Metal gives for lanes shifted past the edge
// by simd_shuffle_down/up.
#pragma once

namespace metile_emu {

constexpr u32 lowest_active_lane = 0xffffffffu;

template <class T>
inline constexpr bool is_simd_value = (is_scalar<T> || (is_vector<T> && !is_swizzle<T>)) && sizeof(T) <= 16;

// Each lane reads the input of the lane named by its param (its own when that
// lane is out of range or inactive).
template <u32 Bytes> void permute_compute(SimdGroup& sg, u32 active) {
  for (u32 lane = 0; lane < simd_width; ++lane) {
    if (!((active >> lane) & 1u)) continue;
    u32 src = sg.lanes[lane].param;
    if (src == lowest_active_lane) src = u32(__builtin_ctz(active));
    bool valid = src < simd_width && ((active >> src) & 1u);
    __builtin_memcpy(sg.lanes[lane].out, sg.lanes[valid ? src : lane].in, Bytes);
  }
}

template <class T> inline T permute(const T& value, u32 src, u32 site) {
  T result;
  simd_sync(&permute_compute<sizeof(T)>, &value, sizeof(T), src, &result, sizeof(T), site);
  return result;
}

// Reductions combine the active lanes in lane order and give every active
// lane the result.
template <class T, class Op> void reduce_compute(SimdGroup& sg, u32 active) {
  bool first = true;
  T acc{};
  for (u32 lane = 0; lane < simd_width; ++lane) {
    if (!((active >> lane) & 1u)) continue;
    T v = load_slot<T>(sg.lanes[lane].in);
    acc = first ? v : Op::apply(acc, v);
    first = false;
  }
  for (u32 lane = 0; lane < simd_width; ++lane)
    if ((active >> lane) & 1u) store_slot(sg.lanes[lane].out, acc);
}

// Prefix scans over the active lanes in lane order; an exclusive scan starts
// from the operation's identity.
template <class T, class Op, bool Inclusive> void scan_compute(SimdGroup& sg, u32 active) {
  T acc = Op::template identity<T>();
  for (u32 lane = 0; lane < simd_width; ++lane) {
    if (!((active >> lane) & 1u)) continue;
    T v = load_slot<T>(sg.lanes[lane].in);
    if (Inclusive) acc = Op::apply(acc, v);
    store_slot(sg.lanes[lane].out, acc);
    if (!Inclusive) acc = Op::apply(acc, v);
  }
}

struct SumOp {
  template <class T> static T apply(const T& a, const T& b) { return T(a + b); }
  template <class T> static T identity() { return T(0); }
};
struct ProductOp {
  template <class T> static T apply(const T& a, const T& b) { return T(a * b); }
  template <class T> static T identity() { return T(1); }
};
struct MaxOp {
  template <class T> static T apply(const T& a, const T& b) { return metal::max(a, b); }
};
struct MinOp {
  template <class T> static T apply(const T& a, const T& b) { return metal::min(a, b); }
};
struct AndOp {
  template <class T> static T apply(const T& a, const T& b) { return T(a & b); }
};
struct OrOp {
  template <class T> static T apply(const T& a, const T& b) { return T(a | b); }
};
struct XorOp {
  template <class T> static T apply(const T& a, const T& b) { return T(a ^ b); }
};

template <class T, class Op> inline T reduce(const T& value, u32 site) {
  T result;
  simd_sync(&reduce_compute<T, Op>, &value, sizeof(T), 0, &result, sizeof(T), site);
  return result;
}

template <class T, class Op, bool Inclusive> inline T scan(const T& value, u32 site) {
  T result;
  simd_sync(&scan_compute<T, Op, Inclusive>, &value, sizeof(T), 0, &result, sizeof(T), site);
  return result;
}

// Votes: every active lane learns which active lanes voted true and which
// lanes are active at all.
struct Vote {
  u32 yes;
  u32 active;
};

inline void vote_compute(SimdGroup& sg, u32 active) {
  Vote vote{0, active};
  for (u32 lane = 0; lane < simd_width; ++lane)
    if (((active >> lane) & 1u) && sg.lanes[lane].in[0]) vote.yes |= 1u << lane;
  for (u32 lane = 0; lane < simd_width; ++lane)
    if ((active >> lane) & 1u) store_slot(sg.lanes[lane].out, vote);
}

inline Vote vote(bool predicate, u32 site) {
  unsigned char in = predicate ? 1 : 0;
  Vote result{};
  simd_sync(&vote_compute, &in, 1, 0, &result, sizeof(result), site);
  return result;
}

}  // namespace metile_emu

namespace metal {

#define METILE_SIMD_T template <class T> requires metile_emu::is_simd_value<T>
#define METILE_SITE_PARAM metile_emu::u32 site = METILE_SITE

METILE_SIMD_T inline T simd_shuffle(T data, ushort lane, METILE_SITE_PARAM) {
  return metile_emu::permute(data, lane, site);
}
METILE_SIMD_T inline T simd_shuffle_xor(T data, ushort mask, METILE_SITE_PARAM) {
  return metile_emu::permute(data, metile_emu::lane_index() ^ mask, site);
}
METILE_SIMD_T inline T simd_shuffle_down(T data, ushort delta, METILE_SITE_PARAM) {
  metile_emu::u32 lane = metile_emu::lane_index();
  metile_emu::u32 src = lane + delta < metile_emu::simd_width ? lane + delta : lane;
  return metile_emu::permute(data, src, site);
}
METILE_SIMD_T inline T simd_shuffle_up(T data, ushort delta, METILE_SITE_PARAM) {
  metile_emu::u32 lane = metile_emu::lane_index();
  return metile_emu::permute(data, lane >= delta ? lane - delta : lane, site);
}
METILE_SIMD_T inline T simd_shuffle_rotate_down(T data, ushort delta, METILE_SITE_PARAM) {
  return metile_emu::permute(data, (metile_emu::lane_index() + delta) % metile_emu::simd_width, site);
}
METILE_SIMD_T inline T simd_shuffle_rotate_up(T data, ushort delta, METILE_SITE_PARAM) {
  metile_emu::u32 w = metile_emu::simd_width;
  return metile_emu::permute(data, (metile_emu::lane_index() + w - delta % w) % w, site);
}
METILE_SIMD_T inline T simd_broadcast(T data, ushort lane, METILE_SITE_PARAM) {
  return metile_emu::permute(data, lane, site);
}
METILE_SIMD_T inline T simd_broadcast_first(T data, METILE_SITE_PARAM) {
  return metile_emu::permute(data, metile_emu::lowest_active_lane, site);
}

METILE_SIMD_T inline T simd_sum(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::SumOp>(data, site); }
METILE_SIMD_T inline T simd_product(T data, METILE_SITE_PARAM) {
  return metile_emu::reduce<T, metile_emu::ProductOp>(data, site);
}
METILE_SIMD_T inline T simd_max(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::MaxOp>(data, site); }
METILE_SIMD_T inline T simd_min(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::MinOp>(data, site); }
METILE_SIMD_T inline T simd_and(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::AndOp>(data, site); }
METILE_SIMD_T inline T simd_or(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::OrOp>(data, site); }
METILE_SIMD_T inline T simd_xor(T data, METILE_SITE_PARAM) { return metile_emu::reduce<T, metile_emu::XorOp>(data, site); }

METILE_SIMD_T inline T simd_prefix_exclusive_sum(T data, METILE_SITE_PARAM) {
  return metile_emu::scan<T, metile_emu::SumOp, false>(data, site);
}
METILE_SIMD_T inline T simd_prefix_inclusive_sum(T data, METILE_SITE_PARAM) {
  return metile_emu::scan<T, metile_emu::SumOp, true>(data, site);
}
METILE_SIMD_T inline T simd_prefix_exclusive_product(T data, METILE_SITE_PARAM) {
  return metile_emu::scan<T, metile_emu::ProductOp, false>(data, site);
}
METILE_SIMD_T inline T simd_prefix_inclusive_product(T data, METILE_SITE_PARAM) {
  return metile_emu::scan<T, metile_emu::ProductOp, true>(data, site);
}

// Result of simd_ballot / simd_active_threads_mask: one bit per lane.
struct simd_vote {
  typedef ulong vote_t;
  explicit constexpr simd_vote(vote_t v = 0) : bits(v) {}
  explicit constexpr operator vote_t() const { return bits; }
  // all() also requires every lane of the simdgroup to be active.
  constexpr bool all() const { return (bits & 0xffffffffu) == 0xffffffffu; }
  constexpr bool any() const { return (bits & 0xffffffffu) != 0; }

 private:
  vote_t bits;
};

inline simd_vote simd_ballot(bool predicate, METILE_SITE_PARAM) {
  return simd_vote(metile_emu::vote(predicate, site).yes);
}
inline simd_vote simd_active_threads_mask(METILE_SITE_PARAM) {
  return simd_vote(metile_emu::vote(true, site).active);
}
inline bool simd_all(bool predicate, METILE_SITE_PARAM) {
  metile_emu::Vote v = metile_emu::vote(predicate, site);
  return v.yes == v.active;
}
inline bool simd_any(bool predicate, METILE_SITE_PARAM) { return metile_emu::vote(predicate, site).yes != 0; }
inline bool simd_is_first(METILE_SITE_PARAM) {
  metile_emu::Vote v = metile_emu::vote(true, site);
  return metile_emu::lane_index() == metile_emu::u32(__builtin_ctz(v.active));
}

// Swizzle arguments (`simd_sum(v.xy)`) are converted to vectors first.
#define METILE_SIMD_SWIZZLE(name)                                                              \
  template <class S>                                                                           \
    requires metile_emu::is_swizzle<S>                                                         \
  inline auto name(const S& data, METILE_SITE_PARAM) {                                         \
    return name(typename metile_emu::bare<S>::vec_type(data), site);                           \
  }
#define METILE_SIMD_SWIZZLE_WITH_ARG(name)                                                     \
  template <class S>                                                                           \
    requires metile_emu::is_swizzle<S>                                                         \
  inline auto name(const S& data, ushort arg, METILE_SITE_PARAM) {                             \
    return name(typename metile_emu::bare<S>::vec_type(data), arg, site);                      \
  }
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle_xor)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle_down)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle_up)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle_rotate_down)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_shuffle_rotate_up)
METILE_SIMD_SWIZZLE_WITH_ARG(simd_broadcast)
METILE_SIMD_SWIZZLE(simd_broadcast_first)
METILE_SIMD_SWIZZLE(simd_sum)
METILE_SIMD_SWIZZLE(simd_product)
METILE_SIMD_SWIZZLE(simd_max)
METILE_SIMD_SWIZZLE(simd_min)
METILE_SIMD_SWIZZLE(simd_and)
METILE_SIMD_SWIZZLE(simd_or)
METILE_SIMD_SWIZZLE(simd_xor)
METILE_SIMD_SWIZZLE(simd_prefix_exclusive_sum)
METILE_SIMD_SWIZZLE(simd_prefix_inclusive_sum)
METILE_SIMD_SWIZZLE(simd_prefix_exclusive_product)
METILE_SIMD_SWIZZLE(simd_prefix_inclusive_product)
#undef METILE_SIMD_SWIZZLE
#undef METILE_SIMD_SWIZZLE_WITH_ARG

#undef METILE_SIMD_T
#undef METILE_SITE_PARAM

}  // namespace metal
