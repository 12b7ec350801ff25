// metal:: math, common, integer and relational functions.
//
// Plain functions follow IEEE semantics (the emulator compiles without fast
// math so results are reproducible; `rsqrt` is correctly rounded, as Apple
// documents for precise mode); `metal::precise::` is identical and
// `metal::fast::` uses the formulas Apple documents for fast mode where they
// change results visibly (tanh overflows to NaN for large inputs, pow goes
// through exp2/log2). half functions compute in float and round once.
#pragma once

// Constants <metal_math> defines as macros (MSL specification, section 6.5).
#define MAXFLOAT 0x1.fffffep+127f
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define FLT_EPSILON 0x1p-23f
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f

namespace metal {

using metile_emu::bit_cast;

template <class To, class From> inline To as_type(const From& v) {
  metile_emu::bare<From> value = v;
  static_assert(sizeof(To) == sizeof(value), "as_type: source and destination sizes differ");
  To result;
  __builtin_memcpy((void*)&result, (const void*)&value, sizeof(To));
  return result;
}

namespace detail {
template <class T, int N, class F> inline vec<T, N> map1(const vec<T, N>& a, F f) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.e[i] = f(a.e[i]);
  return r;
}
template <class T, int N, class F> inline vec<T, N> map2(const vec<T, N>& a, const vec<T, N>& b, F f) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.e[i] = f(a.e[i], b.e[i]);
  return r;
}
template <class T, int N, class F>
inline vec<T, N> map3(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c, F f) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.e[i] = f(a.e[i], b.e[i], c.e[i]);
  return r;
}
template <class T, int N, class F> inline vec<bool, N> test1(const vec<T, N>& a, F f) {
  vec<bool, N> r;
  for (int i = 0; i < N; ++i) r.e[i] = f(a.e[i]);
  return r;
}
}  // namespace detail

// Floating-point functions of one argument: float, half and their vectors.
#define METILE_FLOAT_FN1(name, float_expr)                                                    \
  inline float name(float x) { return float_expr; }                                          \
  inline half name(half hx) {                                                                \
    float x = float(hx);                                                                     \
    return half(float_expr);                                                                 \
  }                                                                                          \
  template <class T, int N>                                                                  \
    requires(metile_emu::is_same<T, float> || metile_emu::is_same<T, half>)                  \
  inline vec<T, N> name(vec<T, N> v) {                                                       \
    return detail::map1(v, [](T x) { return name(x); });                                     \
  }

#define METILE_FLOAT_FN2(name, float_expr)                                                    \
  inline float name(float x, float y) { return float_expr; }                                 \
  inline half name(half hx, half hy) {                                                       \
    float x = float(hx), y = float(hy);                                                      \
    return half(float_expr);                                                                 \
  }                                                                                          \
  template <class T, int N>                                                                  \
    requires(metile_emu::is_same<T, float> || metile_emu::is_same<T, half>)                  \
  inline vec<T, N> name(vec<T, N> a, vec<T, N> b) {                                          \
    return detail::map2(a, b, [](T x, T y) { return name(x, y); });                          \
  }

#define METILE_FLOAT_FN3(name, float_expr)                                                    \
  inline float name(float x, float y, float z) { return float_expr; }                        \
  inline half name(half hx, half hy, half hz) {                                              \
    float x = float(hx), y = float(hy), z = float(hz);                                       \
    return half(float_expr);                                                                 \
  }                                                                                          \
  template <class T, int N>                                                                  \
    requires(metile_emu::is_same<T, float> || metile_emu::is_same<T, half>)                  \
  inline vec<T, N> name(vec<T, N> a, vec<T, N> b, vec<T, N> c) {                             \
    return detail::map3(a, b, c, [](T x, T y, T z) { return name(x, y, z); });               \
  }

METILE_FLOAT_FN1(exp, __builtin_expf(x))
METILE_FLOAT_FN1(exp2, __builtin_exp2f(x))
METILE_FLOAT_FN1(exp10, __builtin_powf(10.0f, x))
METILE_FLOAT_FN1(log, __builtin_logf(x))
METILE_FLOAT_FN1(log2, __builtin_log2f(x))
METILE_FLOAT_FN1(log10, __builtin_log10f(x))
METILE_FLOAT_FN1(sqrt, __builtin_sqrtf(x))
METILE_FLOAT_FN1(rsqrt, float(1.0 / __builtin_sqrt(double(x))))
METILE_FLOAT_FN1(sin, __builtin_sinf(x))
METILE_FLOAT_FN1(cos, __builtin_cosf(x))
METILE_FLOAT_FN1(tan, __builtin_tanf(x))
METILE_FLOAT_FN1(asin, __builtin_asinf(x))
METILE_FLOAT_FN1(acos, __builtin_acosf(x))
METILE_FLOAT_FN1(atan, __builtin_atanf(x))
METILE_FLOAT_FN1(sinh, __builtin_sinhf(x))
METILE_FLOAT_FN1(cosh, __builtin_coshf(x))
METILE_FLOAT_FN1(tanh, __builtin_tanhf(x))
METILE_FLOAT_FN1(floor, __builtin_floorf(x))
METILE_FLOAT_FN1(ceil, __builtin_ceilf(x))
METILE_FLOAT_FN1(trunc, __builtin_truncf(x))
METILE_FLOAT_FN1(round, __builtin_roundf(x))
METILE_FLOAT_FN1(rint, __builtin_rintf(x))
METILE_FLOAT_FN1(fabs, __builtin_fabsf(x))
METILE_FLOAT_FN1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
METILE_FLOAT_FN1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x)))
METILE_FLOAT_FN1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
METILE_FLOAT_FN2(pow, __builtin_powf(x, y))
METILE_FLOAT_FN2(powr, __builtin_powf(x, y))
METILE_FLOAT_FN2(fmax, __builtin_fmaxf(x, y))
METILE_FLOAT_FN2(fmin, __builtin_fminf(x, y))
METILE_FLOAT_FN2(fmod, __builtin_fmodf(x, y))
METILE_FLOAT_FN2(atan2, __builtin_atan2f(x, y))
METILE_FLOAT_FN2(copysign, __builtin_copysignf(x, y))
METILE_FLOAT_FN2(step, y < x ? 0.0f : 1.0f)
METILE_FLOAT_FN2(divide, x / y)
METILE_FLOAT_FN3(fma, __builtin_fmaf(x, y, z))
METILE_FLOAT_FN3(mix, x + (y - x) * z)

// fast:: variants. Only the ones whose fast-mode formula changes results in a
// way kernels must guard against differ from the precise versions.
namespace fast {
METILE_FLOAT_FN1(exp, __builtin_expf(x))
METILE_FLOAT_FN1(exp2, __builtin_exp2f(x))
METILE_FLOAT_FN1(log, __builtin_logf(x))
METILE_FLOAT_FN1(log2, __builtin_log2f(x))
METILE_FLOAT_FN1(sqrt, __builtin_sqrtf(x))
METILE_FLOAT_FN1(rsqrt, 1.0f / __builtin_sqrtf(x))
METILE_FLOAT_FN1(sin, __builtin_sinf(x))
METILE_FLOAT_FN1(cos, __builtin_cosf(x))
METILE_FLOAT_FN1(tanh, (__builtin_expf(2.0f * x) - 1.0f) / (__builtin_expf(2.0f * x) + 1.0f))
METILE_FLOAT_FN2(pow, __builtin_exp2f(y * __builtin_log2f(x)))
METILE_FLOAT_FN2(powr, __builtin_exp2f(y * __builtin_log2f(x)))
METILE_FLOAT_FN2(fmax, __builtin_fmaxf(x, y))
METILE_FLOAT_FN2(fmin, __builtin_fminf(x, y))
METILE_FLOAT_FN2(divide, x / y)
}  // namespace fast

namespace precise {
METILE_FLOAT_FN1(tan, __builtin_tanf(x))
METILE_FLOAT_FN1(asin, __builtin_asinf(x))
METILE_FLOAT_FN1(acos, __builtin_acosf(x))
METILE_FLOAT_FN1(atan, __builtin_atanf(x))
METILE_FLOAT_FN1(sinh, __builtin_sinhf(x))
METILE_FLOAT_FN1(cosh, __builtin_coshf(x))
METILE_FLOAT_FN2(atan2, __builtin_atan2f(x, y))
METILE_FLOAT_FN1(exp, __builtin_expf(x))
METILE_FLOAT_FN1(exp2, __builtin_exp2f(x))
METILE_FLOAT_FN1(log, __builtin_logf(x))
METILE_FLOAT_FN1(log2, __builtin_log2f(x))
METILE_FLOAT_FN1(sqrt, __builtin_sqrtf(x))
METILE_FLOAT_FN1(rsqrt, float(1.0 / __builtin_sqrt(double(x))))
METILE_FLOAT_FN1(sin, __builtin_sinf(x))
METILE_FLOAT_FN1(cos, __builtin_cosf(x))
METILE_FLOAT_FN1(tanh, __builtin_tanhf(x))
METILE_FLOAT_FN2(pow, __builtin_powf(x, y))
METILE_FLOAT_FN2(powr, __builtin_powf(x, y))
METILE_FLOAT_FN2(fmax, __builtin_fmaxf(x, y))
METILE_FLOAT_FN2(fmin, __builtin_fminf(x, y))
METILE_FLOAT_FN2(divide, x / y)
}  // namespace precise

#undef METILE_FLOAT_FN1
#undef METILE_FLOAT_FN2
#undef METILE_FLOAT_FN3

// abs, min, max, clamp over every scalar type; floats use fmin/fmax semantics
// (the non-NaN operand wins), as Metal's min/max do.
#define METILE_MINMAX_INT(T)                                           \
  inline T min(T a, T b) { return b < a ? b : a; }                     \
  inline T max(T a, T b) { return a < b ? b : a; }                     \
  inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
METILE_MINMAX_INT(char)
METILE_MINMAX_INT(uchar)
METILE_MINMAX_INT(short)
METILE_MINMAX_INT(ushort)
METILE_MINMAX_INT(int)
METILE_MINMAX_INT(uint)
METILE_MINMAX_INT(long)
METILE_MINMAX_INT(ulong)
#undef METILE_MINMAX_INT

inline float min(float a, float b) { return __builtin_fminf(a, b); }
inline float max(float a, float b) { return __builtin_fmaxf(a, b); }
inline float clamp(float x, float lo, float hi) { return __builtin_fminf(__builtin_fmaxf(x, lo), hi); }
inline half min(half a, half b) { return half(__builtin_fminf(float(a), float(b))); }
inline half max(half a, half b) { return half(__builtin_fmaxf(float(a), float(b))); }
inline half clamp(half x, half lo, half hi) { return min(max(x, lo), hi); }
inline bfloat min(bfloat a, bfloat b) { return bfloat(__builtin_fminf(float(a), float(b))); }
inline bfloat max(bfloat a, bfloat b) { return bfloat(__builtin_fmaxf(float(a), float(b))); }
inline bfloat clamp(bfloat x, bfloat lo, bfloat hi) { return min(max(x, lo), hi); }

inline char abs(char x) { return x < 0 ? char(-x) : x; }
inline short abs(short x) { return x < 0 ? short(-x) : x; }
inline int abs(int x) { return x < 0 ? -x : x; }
inline long abs(long x) { return x < 0 ? -x : x; }
inline uchar abs(uchar x) { return x; }
inline ushort abs(ushort x) { return x; }
inline uint abs(uint x) { return x; }
inline ulong abs(ulong x) { return x; }
inline float abs(float x) { return __builtin_fabsf(x); }
inline half abs(half x) { return half(__builtin_fabsf(float(x))); }
inline bfloat abs(bfloat x) { return bfloat::from_bits((unsigned short)(x.bits & 0x7fffu)); }

template <class T, int N> inline vec<T, N> min(vec<T, N> a, vec<T, N> b) {
  return detail::map2(a, b, [](T x, T y) { return min(x, y); });
}
template <class T, int N> inline vec<T, N> max(vec<T, N> a, vec<T, N> b) {
  return detail::map2(a, b, [](T x, T y) { return max(x, y); });
}
template <class T, int N> inline vec<T, N> min(vec<T, N> a, T b) { return min(a, vec<T, N>(b)); }
template <class T, int N> inline vec<T, N> max(vec<T, N> a, T b) { return max(a, vec<T, N>(b)); }
template <class T, int N> inline vec<T, N> clamp(vec<T, N> x, vec<T, N> lo, vec<T, N> hi) {
  return detail::map3(x, lo, hi, [](T v, T l, T h) { return clamp(v, l, h); });
}
template <class T, int N> inline vec<T, N> clamp(vec<T, N> x, T lo, T hi) {
  return clamp(x, vec<T, N>(lo), vec<T, N>(hi));
}
template <class T, int N> inline vec<T, N> abs(vec<T, N> a) {
  return detail::map1(a, [](T x) { return abs(x); });
}

// select(a, b, c) returns c ? b : a, per component.
template <class T>
  requires metile_emu::is_scalar<T>
inline T select(T a, T b, bool c) {
  return c ? b : a;
}
template <class T, int N> inline vec<T, N> select(vec<T, N> a, vec<T, N> b, vec<bool, N> c) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.e[i] = c.e[i] ? b.e[i] : a.e[i];
  return r;
}
template <class T, int N> inline vec<T, N> select(vec<T, N> a, vec<T, N> b, bool c) { return c ? b : a; }

inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool isnan(half x) { return __builtin_isnan(float(x)); }
inline bool isinf(half x) { return __builtin_isinf(float(x)); }
inline bool isfinite(half x) { return __builtin_isfinite(float(x)); }
inline bool signbit(half x) { return __builtin_signbit(float(x)); }
inline bool isnan(bfloat x) { return __builtin_isnan(float(x)); }
inline bool isinf(bfloat x) { return __builtin_isinf(float(x)); }
template <class T, int N> inline vec<bool, N> isnan(vec<T, N> v) {
  return detail::test1(v, [](T x) { return isnan(x); });
}
template <class T, int N> inline vec<bool, N> isinf(vec<T, N> v) {
  return detail::test1(v, [](T x) { return isinf(x); });
}
template <class T, int N> inline vec<bool, N> isfinite(vec<T, N> v) {
  return detail::test1(v, [](T x) { return isfinite(x); });
}

inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <int N> inline bool all(vec<bool, N> v) {
  for (int i = 0; i < N; ++i)
    if (!v.e[i]) return false;
  return true;
}
template <int N> inline bool any(vec<bool, N> v) {
  for (int i = 0; i < N; ++i)
    if (v.e[i]) return true;
  return false;
}

template <class T, int N> inline T dot(vec<T, N> a, vec<T, N> b) {
  T sum = T(0);
  for (int i = 0; i < N; ++i) sum = T(sum + a.e[i] * b.e[i]);
  return sum;
}
template <class T, int N> inline T length(vec<T, N> a) { return sqrt(dot(a, a)); }

// Integer bit functions.
inline uint popcount(uint x) { return uint(__builtin_popcount(x)); }
inline int popcount(int x) { return __builtin_popcount(uint(x)); }
inline ulong popcount(ulong x) { return ulong(__builtin_popcountl(x)); }
inline uint clz(uint x) { return x == 0 ? 32u : uint(__builtin_clz(x)); }
inline int clz(int x) { return int(clz(uint(x))); }
inline uint ctz(uint x) { return x == 0 ? 32u : uint(__builtin_ctz(x)); }
inline int ctz(int x) { return int(ctz(uint(x))); }
inline uint mulhi(uint a, uint b) { return uint((ulong(a) * ulong(b)) >> 32); }
inline int mulhi(int a, int b) { return int((long(a) * long(b)) >> 32); }
inline ulong mulhi(ulong a, ulong b) { return ulong((unsigned __int128)a * b >> 64); }
inline long mulhi(long a, long b) { return long((__int128)a * b >> 64); }

// Swizzles (`v.xy`) are proxies, not vectors, so template deduction skips
// them; these overloads convert them to vectors and call the real function.
namespace detail {
template <class T> inline auto unswizzle(const T& v) {
  if constexpr (metile_emu::is_swizzle<T>) return typename metile_emu::bare<T>::vec_type(v);
  else return metile_emu::bare<T>(v);
}
template <class... A> inline constexpr bool any_swizzle = (metile_emu::is_swizzle<A> || ...);
}  // namespace detail

#define METILE_SWIZZLE_FORWARD(name)                                                         \
  template <class... A>                                                                      \
    requires detail::any_swizzle<A...>                                                       \
  inline auto name(const A&... args)->decltype(name(detail::unswizzle(args)...)) {           \
    return name(detail::unswizzle(args)...);                                                 \
  }
#define METILE_SWIZZLE_FORWARD_FLOAT_FNS                                                     \
  METILE_SWIZZLE_FORWARD(exp)                                                                \
  METILE_SWIZZLE_FORWARD(exp2)                                                               \
  METILE_SWIZZLE_FORWARD(log)                                                                \
  METILE_SWIZZLE_FORWARD(log2)                                                               \
  METILE_SWIZZLE_FORWARD(sqrt)                                                               \
  METILE_SWIZZLE_FORWARD(rsqrt)                                                              \
  METILE_SWIZZLE_FORWARD(sin)                                                                \
  METILE_SWIZZLE_FORWARD(cos)                                                                \
  METILE_SWIZZLE_FORWARD(tanh)                                                               \
  METILE_SWIZZLE_FORWARD(pow)                                                                \
  METILE_SWIZZLE_FORWARD(powr)                                                               \
  METILE_SWIZZLE_FORWARD(fmax)                                                               \
  METILE_SWIZZLE_FORWARD(fmin)                                                               \
  METILE_SWIZZLE_FORWARD(divide)
METILE_SWIZZLE_FORWARD_FLOAT_FNS
METILE_SWIZZLE_FORWARD(exp10)
METILE_SWIZZLE_FORWARD(log10)
METILE_SWIZZLE_FORWARD(tan)
METILE_SWIZZLE_FORWARD(asin)
METILE_SWIZZLE_FORWARD(acos)
METILE_SWIZZLE_FORWARD(atan)
METILE_SWIZZLE_FORWARD(sinh)
METILE_SWIZZLE_FORWARD(cosh)
METILE_SWIZZLE_FORWARD(floor)
METILE_SWIZZLE_FORWARD(ceil)
METILE_SWIZZLE_FORWARD(trunc)
METILE_SWIZZLE_FORWARD(round)
METILE_SWIZZLE_FORWARD(rint)
METILE_SWIZZLE_FORWARD(fabs)
METILE_SWIZZLE_FORWARD(fract)
METILE_SWIZZLE_FORWARD(sign)
METILE_SWIZZLE_FORWARD(saturate)
METILE_SWIZZLE_FORWARD(fmod)
METILE_SWIZZLE_FORWARD(atan2)
METILE_SWIZZLE_FORWARD(copysign)
METILE_SWIZZLE_FORWARD(step)
METILE_SWIZZLE_FORWARD(fma)
METILE_SWIZZLE_FORWARD(mix)
METILE_SWIZZLE_FORWARD(min)
METILE_SWIZZLE_FORWARD(max)
METILE_SWIZZLE_FORWARD(clamp)
METILE_SWIZZLE_FORWARD(abs)
METILE_SWIZZLE_FORWARD(select)
METILE_SWIZZLE_FORWARD(isnan)
METILE_SWIZZLE_FORWARD(isinf)
METILE_SWIZZLE_FORWARD(isfinite)
METILE_SWIZZLE_FORWARD(all)
METILE_SWIZZLE_FORWARD(any)
METILE_SWIZZLE_FORWARD(dot)
METILE_SWIZZLE_FORWARD(length)
namespace fast {
METILE_SWIZZLE_FORWARD_FLOAT_FNS
}  // namespace fast
namespace precise {
METILE_SWIZZLE_FORWARD_FLOAT_FNS
}  // namespace precise
#undef METILE_SWIZZLE_FORWARD_FLOAT_FNS

}  // namespace metal
