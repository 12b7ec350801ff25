// Metal vector types: vec<T, N> for N = 2, 3, 4, the named aliases (float4,
// half2, uint3, ...) and the packed_* variants.
//
// Vectors are classes rather than clang ext_vector_type values because MSL's
// conversion rules differ from clang's: `float4(int4_value)` converts each
// component (clang would reinterpret the bits), comparisons yield bool vectors
// (clang yields -1/0 integer vectors), and `float4(a.xy, b, c)` style
// constructors exist. Sizes and alignments follow MSL: a 3-component vector
// occupies the space of 4 components.
//
// Swizzles: single components (.x .y .z .w and .r .g .b .a) are plain members.
// Multi-component swizzles (.xy, .zyx, .xxyy, ...; x y z w names only) are
// proxy members over the same storage (metile_emu::swizzle): they convert to a
// vector, can be assigned when no component repeats, and work in every
// address space. The proxies give vectors a user-written copy assignment, so
// vectors are not trivially copyable, but their copy constructor stays
// trivial and they are still passed in registers.
#pragma once

template <class T, int N> struct vec;
template <class T, int N> struct packed_vec;

namespace metile_emu {

// Empty base of every swizzle proxy: it makes vec<T, K> an associated class of
// the proxy, so argument-dependent lookup finds vec's operators for
// expressions such as `a.xy + b.zw`.
template <class V> struct swizzle_tag {};

template <class T, int P, int... I> struct swizzle;

template <class T> struct vec_traits {
  static constexpr int size = 0;
  static constexpr bool is_vector = false;
  static constexpr bool is_swizzle = false;
  using element = T;
  static constexpr int index(int i) { return i; }
};
template <class T, int N> struct vec_traits<vec<T, N>> : vec_traits<void> {
  static constexpr int size = N;
  static constexpr bool is_vector = true;
  using element = T;
};
template <class T, int N> struct vec_traits<packed_vec<T, N>> : vec_traits<void> {
  static constexpr int size = N;
  static constexpr bool is_vector = true;
  using element = T;
};
template <class T, int P, int... I> struct vec_traits<swizzle<T, P, I...>> : vec_traits<void> {
  static constexpr int size = sizeof...(I);
  static constexpr bool is_vector = true;
  static constexpr bool is_swizzle = true;
  using element = T;
  static constexpr int index(int i) { return swizzle<T, P, I...>::indices[i]; }
};

template <class T> inline constexpr bool is_vector = vec_traits<bare<T>>::is_vector;
template <class T> inline constexpr bool is_swizzle = vec_traits<bare<T>>::is_swizzle;
template <class T> inline constexpr int component_count = is_vector<T> ? vec_traits<bare<T>>::size : 1;
template <class T> using element_of = typename vec_traits<bare<T>>::element;

// Component i of a vector, packed vector or swizzle (any address space).
template <class V> inline element_of<V> component(const V& v, int i) {
  return v.e[vec_traits<bare<V>>::index(i)];
}


template <int... I> constexpr bool indices_distinct() {
  constexpr int idx[] = {I...};
  for (unsigned i = 0; i < sizeof...(I); ++i)
    for (unsigned j = i + 1; j < sizeof...(I); ++j)
      if (idx[i] == idx[j]) return false;
  return true;
}

// A multi-component swizzle of a vector whose storage holds P elements.
template <class T, int P, int... I> struct swizzle : swizzle_tag<vec<T, sizeof...(I)>> {
  using vec_type = vec<T, sizeof...(I)>;
  static constexpr int size = sizeof...(I);
  static constexpr int indices[] = {I...};
  static constexpr bool writable = indices_distinct<I...>();

  T e[P];

  // Assigning one swizzle to another of the same pattern writes only the
  // selected components (a plain member-wise copy would clobber the rest).
  swizzle& operator=(const swizzle& other)
    requires writable
  {
    T values[] = {other.e[I]...};
    int k = 0;
    ((e[I] = values[k++]), ...);
    return *this;
  }

  // From a vector (or swizzle) of the same element type and size, or a scalar.
  template <class Self, class R>
    requires(!is_const_obj<Self> && writable &&
             (is_scalar<R> || (component_count<R> == size && is_same<element_of<R>, T>)))
  Self&& operator=(this Self&& self, const R& rhs) {
    vec_type v(rhs);
    int k = 0;
    ((self.e[I] = v.e[k++]), ...);
    return static_cast<Self&&>(self);
  }

#define METILE_SWIZZLE_COMPOUND(op)                                              \
  template <class Self, class R>                                                \
    requires(!is_const_obj<Self> && writable)                                   \
  Self&& operator op##=(this Self&& self, const R& rhs) {                       \
    vec_type result = vec_type(self) op rhs;                                    \
    int k = 0;                                                                  \
    ((self.e[I] = result.e[k++]), ...);                                         \
    return static_cast<Self&&>(self);                                           \
  }
  METILE_SWIZZLE_COMPOUND(+)
  METILE_SWIZZLE_COMPOUND(-)
  METILE_SWIZZLE_COMPOUND(*)
  METILE_SWIZZLE_COMPOUND(/)
#undef METILE_SWIZZLE_COMPOUND
};

}  // namespace metile_emu

#include "swizzles.h"

namespace metile_emu {

template <class T, int N> struct vec_storage;
template <class T> struct alignas(2 * sizeof(T)) vec_storage<T, 2> {
  union {
    T e[2];
    struct { T x, y; };
    struct { T r, g; };
    METILE_SWIZZLE_MEMBERS_2
  };
};
template <class T> struct alignas(4 * sizeof(T)) vec_storage<T, 3> {
  union {
    T e[4];
    struct { T x, y, z; };
    struct { T r, g, b; };
    METILE_SWIZZLE_MEMBERS_3
  };
};
template <class T> struct alignas(4 * sizeof(T)) vec_storage<T, 4> {
  union {
    T e[4];
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
    METILE_SWIZZLE_MEMBERS_4
  };
};

// Writes the components of one constructor argument (scalar or vector) into
// `out`, converting each to T, and advances `out`.
template <class T, class A> inline void put_components(T*& out, const A& a) {
  if constexpr (is_vector<A>) {
    for (int i = 0; i < component_count<A>; ++i) *out++ = convert_scalar<T>(component(a, i));
  } else {
    *out++ = convert_scalar<T>(a);
  }
}

}  // namespace metile_emu

template <class T, int N> struct vec : metile_emu::vec_storage<T, N> {
  static_assert(N >= 2 && N <= 4, "Metal vectors have 2, 3 or 4 components");
  using element_type = T;
  static constexpr int size = N;

  vec() = default;
  vec(const vec&) = default;

  // Loads a vector of the same type from device/threadgroup/constant memory
  // (one access check for the whole vector).
  template <class Src>
    requires(metile_emu::is_same<metile_emu::bare<Src>, vec> && !metile_emu::is_same<Src, vec>)
  vec(const Src& other) {
    const vec& source = metile_emu::plain_read<vec>(other);
    for (int i = 0; i < N; ++i) this->e[i] = source.e[i];
  }

  // A scalar converts implicitly to a vector by replicating it (MSL 2.12).
  template <class U>
    requires metile_emu::is_scalar<U>
  vec(const U& s) {
    T v = metile_emu::convert_scalar<T>(s);
    for (int i = 0; i < N; ++i) this->e[i] = v;
  }

  // Vector of another element type or a packed vector: per-component
  // conversion. Only packed<->unpacked of the same element type is implicit.
  template <class V>
    requires(metile_emu::is_vector<V> && metile_emu::component_count<V> == N &&
             !metile_emu::is_same<metile_emu::bare<V>, vec>)
  explicit(!metile_emu::is_same<metile_emu::element_of<V>, T>) vec(const V& other) {
    for (int i = 0; i < N; ++i) this->e[i] = metile_emu::convert_scalar<T>(metile_emu::component(other, i));
  }

  // The swizzle proxies in the storage union rule out a defaulted assignment.
  vec& operator=(const vec& other) {
    for (int i = 0; i < N; ++i) this->e[i] = other.e[i];
    return *this;
  }

  // Component-wise construction: float4(a, b, c, d), float4(v2, z, w), ...
  template <class A0, class A1, class... Rest>
    requires((metile_emu::component_count<A0> + metile_emu::component_count<A1> +
              (0 + ... + metile_emu::component_count<Rest>)) == N)
  vec(const A0& a0, const A1& a1, const Rest&... rest) {
    T* out = this->e;
    metile_emu::put_components(out, a0);
    metile_emu::put_components(out, a1);
    (metile_emu::put_components(out, rest), ...);
  }

  template <class Self> decltype(auto) operator[](this Self&& self, int i) { return (self.e[i]); }

  // Stores into a vector in another address space, or from a scalar (which
  // widens) or a swizzle/packed vector of the same element type.
  template <class Self, class R>
    requires(!metile_emu::is_const_obj<Self> &&
             (metile_emu::is_scalar<R> ||
              (metile_emu::component_count<R> == N && metile_emu::is_same<metile_emu::element_of<R>, T>)))
  Self&& operator=(this Self&& self, const R& rhs) {
    vec v(rhs);
    vec& target = metile_emu::plain_write<vec>(self);
    for (int i = 0; i < N; ++i) target.e[i] = v.e[i];
    return static_cast<Self&&>(self);
  }

#define METILE_VEC_COMPOUND(op)                                                   \
  template <class Self, class R>                                                   \
    requires(!metile_emu::is_const_obj<Self>)                                      \
  Self&& operator op##=(this Self&& self, const R& rhs) {                          \
    vec result = vec(self) op rhs;                                                 \
    for (int i = 0; i < N; ++i) self.e[i] = result.e[i];                           \
    return static_cast<Self&&>(self);                                              \
  }
  METILE_VEC_COMPOUND(+)
  METILE_VEC_COMPOUND(-)
  METILE_VEC_COMPOUND(*)
  METILE_VEC_COMPOUND(/)
  METILE_VEC_COMPOUND(%)
  METILE_VEC_COMPOUND(&)
  METILE_VEC_COMPOUND(|)
  METILE_VEC_COMPOUND(^)
  METILE_VEC_COMPOUND(<<)
  METILE_VEC_COMPOUND(>>)
#undef METILE_VEC_COMPOUND

  static constexpr bool arith = metile_emu::is_arith_scalar<T>;
  static constexpr bool integral = metile_emu::is_integral<T> && !metile_emu::is_same<T, bool>;

#define METILE_VEC_BINOP(op, cond)                                                          \
  friend vec operator op(const vec& a, const vec& b)                                        \
    requires(cond)                                                                          \
  {                                                                                         \
    vec r;                                                                                  \
    for (int i = 0; i < N; ++i) r.e[i] = T(a.e[i] op b.e[i]);                               \
    return r;                                                                               \
  }                                                                                         \
  friend vec operator op(const vec& a, T s)                                                 \
    requires(cond)                                                                          \
  {                                                                                         \
    vec r;                                                                                  \
    for (int i = 0; i < N; ++i) r.e[i] = T(a.e[i] op s);                                    \
    return r;                                                                               \
  }                                                                                         \
  friend vec operator op(T s, const vec& b)                                                 \
    requires(cond)                                                                          \
  {                                                                                         \
    vec r;                                                                                  \
    for (int i = 0; i < N; ++i) r.e[i] = T(s op b.e[i]);                                    \
    return r;                                                                               \
  }
  METILE_VEC_BINOP(+, arith)
  METILE_VEC_BINOP(-, arith)
  METILE_VEC_BINOP(*, arith)
  METILE_VEC_BINOP(/, arith)
  METILE_VEC_BINOP(%, integral)
  METILE_VEC_BINOP(&, metile_emu::is_integral<T>)
  METILE_VEC_BINOP(|, metile_emu::is_integral<T>)
  METILE_VEC_BINOP(^, metile_emu::is_integral<T>)
  METILE_VEC_BINOP(<<, integral)
  METILE_VEC_BINOP(>>, integral)
#undef METILE_VEC_BINOP

#define METILE_VEC_CMP(op)                                                                   \
  friend vec<bool, N> operator op(const vec& a, const vec& b) {                              \
    vec<bool, N> r;                                                                          \
    for (int i = 0; i < N; ++i) r.e[i] = a.e[i] op b.e[i];                                   \
    return r;                                                                                \
  }                                                                                          \
  friend vec<bool, N> operator op(const vec& a, T s) {                                       \
    vec<bool, N> r;                                                                          \
    for (int i = 0; i < N; ++i) r.e[i] = a.e[i] op s;                                        \
    return r;                                                                                \
  }                                                                                          \
  friend vec<bool, N> operator op(T s, const vec& b) {                                       \
    vec<bool, N> r;                                                                          \
    for (int i = 0; i < N; ++i) r.e[i] = s op b.e[i];                                        \
    return r;                                                                                \
  }
  METILE_VEC_CMP(==)
  METILE_VEC_CMP(!=)
  METILE_VEC_CMP(<)
  METILE_VEC_CMP(>)
  METILE_VEC_CMP(<=)
  METILE_VEC_CMP(>=)
#undef METILE_VEC_CMP

  friend vec operator-(const vec& a)
    requires arith
  {
    vec r;
    for (int i = 0; i < N; ++i) r.e[i] = T(-a.e[i]);
    return r;
  }
  friend vec operator+(const vec& a)
    requires arith
  {
    return a;
  }
  friend vec operator~(const vec& a)
    requires integral
  {
    vec r;
    for (int i = 0; i < N; ++i) r.e[i] = T(~a.e[i]);
    return r;
  }
  friend vec<bool, N> operator!(const vec& a) {
    vec<bool, N> r;
    for (int i = 0; i < N; ++i) r.e[i] = !a.e[i];
    return r;
  }
  friend vec<bool, N> operator&&(const vec& a, const vec& b) {
    vec<bool, N> r;
    for (int i = 0; i < N; ++i) r.e[i] = a.e[i] && b.e[i];
    return r;
  }
  friend vec<bool, N> operator||(const vec& a, const vec& b) {
    vec<bool, N> r;
    for (int i = 0; i < N; ++i) r.e[i] = a.e[i] || b.e[i];
    return r;
  }
};

// Packed vectors: no padding, aligned to the component (packed_float3 is 12
// bytes). They convert implicitly to and from the regular vector type (the
// packed -> vec direction is vec's converting constructor).
template <class T, int N> struct packed_vec {
  union {
    T e[N];
    struct { T x, y; };
    struct { T r, g; };
  };

  packed_vec() = default;
  template <class Src>
    requires(metile_emu::is_same<metile_emu::bare<Src>, packed_vec> && !metile_emu::is_same<Src, packed_vec>)
  packed_vec(const Src& other) {
    for (int i = 0; i < N; ++i) e[i] = other.e[i];
  }
  packed_vec(const vec<T, N>& v) {
    for (int i = 0; i < N; ++i) e[i] = v.e[i];
  }
  template <class A0, class... Rest>
    requires(!metile_emu::is_same<metile_emu::bare<A0>, packed_vec> &&
             !(sizeof...(Rest) == 0 && metile_emu::is_same<metile_emu::bare<A0>, vec<T, N>>))
  explicit(sizeof...(Rest) == 0) packed_vec(const A0& a0, const Rest&... rest) {
    vec<T, N> v(a0, rest...);
    for (int i = 0; i < N; ++i) e[i] = v.e[i];
  }

  template <class Self> decltype(auto) operator[](this Self&& self, int i) { return (self.e[i]); }
  template <class Self>
    requires(!metile_emu::is_const_obj<Self>)
  Self&& operator=(this Self&& self, const vec<T, N>& v) {
    for (int i = 0; i < N; ++i) self.e[i] = v.e[i];
    return static_cast<Self&&>(self);
  }
};

// Packed 3- and 4-component vectors need their own member names (.z, .w).
#define METILE_COMMA ,

#define METILE_PACKED_SPECIALIZATION(NC, MEMBERS, COLORS)                                    \
  template <class T> struct packed_vec<T, NC> {                                              \
    union {                                                                                  \
      T e[NC];                                                                               \
      struct { T MEMBERS; };                                                                 \
      struct { T COLORS; };                                                                  \
    };                                                                                       \
    packed_vec() = default;                                                                  \
    template <class Src>                                                                     \
      requires(metile_emu::is_same<metile_emu::bare<Src>, packed_vec> &&                     \
               !metile_emu::is_same<Src, packed_vec>)                                        \
    packed_vec(const Src& other) {                                                           \
      for (int i = 0; i < NC; ++i) e[i] = other.e[i];                                        \
    }                                                                                        \
    packed_vec(const vec<T, NC>& v) {                                                        \
      for (int i = 0; i < NC; ++i) e[i] = v.e[i];                                            \
    }                                                                                        \
    template <class A0, class... Rest>                                                       \
      requires(!metile_emu::is_same<metile_emu::bare<A0>, packed_vec> &&                     \
               !(sizeof...(Rest) == 0 && metile_emu::is_same<metile_emu::bare<A0>, vec<T, NC>>)) \
    explicit(sizeof...(Rest) == 0) packed_vec(const A0& a0, const Rest&... rest) {           \
      vec<T, NC> v(a0, rest...);                                                             \
      for (int i = 0; i < NC; ++i) e[i] = v.e[i];                                            \
    }                                                                                        \
    template <class Self> decltype(auto) operator[](this Self&& self, int i) { return (self.e[i]); } \
    template <class Self>                                                                    \
      requires(!metile_emu::is_const_obj<Self>)                                              \
    Self&& operator=(this Self&& self, const vec<T, NC>& v) {                                \
      for (int i = 0; i < NC; ++i) self.e[i] = v.e[i];                                       \
      return static_cast<Self&&>(self);                                                      \
    }                                                                                        \
  };
METILE_PACKED_SPECIALIZATION(3, x METILE_COMMA y METILE_COMMA z, r METILE_COMMA g METILE_COMMA b)
METILE_PACKED_SPECIALIZATION(4, x METILE_COMMA y METILE_COMMA z METILE_COMMA w, r METILE_COMMA g METILE_COMMA b METILE_COMMA a)
#undef METILE_PACKED_SPECIALIZATION
#undef METILE_COMMA

#define METILE_VECTOR_ALIASES(S)             \
  typedef vec<S, 2> S##2;                    \
  typedef vec<S, 3> S##3;                    \
  typedef vec<S, 4> S##4;                    \
  typedef packed_vec<S, 2> packed_##S##2;    \
  typedef packed_vec<S, 3> packed_##S##3;    \
  typedef packed_vec<S, 4> packed_##S##4;
METILE_VECTOR_ALIASES(bool)
METILE_VECTOR_ALIASES(char)
METILE_VECTOR_ALIASES(uchar)
METILE_VECTOR_ALIASES(short)
METILE_VECTOR_ALIASES(ushort)
METILE_VECTOR_ALIASES(int)
METILE_VECTOR_ALIASES(uint)
METILE_VECTOR_ALIASES(long)
METILE_VECTOR_ALIASES(ulong)
METILE_VECTOR_ALIASES(half)
METILE_VECTOR_ALIASES(bfloat)
METILE_VECTOR_ALIASES(float)
#undef METILE_VECTOR_ALIASES

namespace metal {
using ::bfloat;
using ::half;
using ::packed_vec;
using ::uchar;
using ::uint;
using ::ulong;
using ::ushort;
using ::vec;
}  // namespace metal
