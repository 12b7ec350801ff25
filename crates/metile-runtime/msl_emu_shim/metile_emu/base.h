// Address spaces, scalar types, type traits and bfloat for the MSL emulator.
//
// `device` and `constant` are real clang address spaces, so a `device float*`
// is a distinct type from a `constant float*` or a plain (thread) pointer:
// overloads per address space exist and MSL that mixes address spaces without
// a cast fails to compile here as it would under Metal. The `thread` address
// space is C++'s default one.
//
// `threadgroup` cannot be an address-space attribute: kernels also spell it as
// the argument attribute `[[threadgroup(0)]]`, and any macro expansion that
// starts with __attribute__ breaks that. It expands to the keyword `volatile`
// instead, which is legal as an attribute name (so `[[volatile(0)]]` is an
// ignored attribute) and still keeps threadgroup pointers from converting
// implicitly to thread or device pointers.
//
// Class types (vectors, bfloat, matrices) use C++23 explicit object parameters
// ("deducing this") so their members work on objects in any address space.
#pragma once

// Hand-written context switches for x86-64 and AArch64; other hosts (or a
// build with METILE_EMU_FORCE_UCONTEXT, used to test it) use ucontext, whose
// system header must come before the address-space macros below.
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(METILE_EMU_FORCE_UCONTEXT)
#define METILE_EMU_ASM_SWITCH 1
#else
#define METILE_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup volatile
#define thread
#define kernel
#define METILE_AS(n) __attribute__((address_space(n)))

// Call-site identity recorded by barriers and SIMD-group functions so that
// threads meeting at *different* calls (divergent control flow) are reported
// instead of being silently matched.
#define METILE_SITE (::metile_emu::make_site(__builtin_LINE(), __builtin_COLUMN()))

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;

namespace metile_emu {

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr u32 make_site(u32 line, u32 column) { return (line << 10) | (column & 1023u); }
constexpr u32 site_line(u32 site) { return site >> 10; }

template <class A, class B> inline constexpr bool is_same = false;
template <class A> inline constexpr bool is_same<A, A> = true;

// Strips const/volatile and any address space, so traits see the value type.
template <class T> struct bare_impl { using type = T; };
template <class T> struct bare_impl<const T> : bare_impl<T> {};
template <class T> struct bare_impl<volatile T> : bare_impl<T> {};
template <class T> struct bare_impl<const volatile T> : bare_impl<T> {};
template <class T, int N> struct bare_impl<METILE_AS(N) T> : bare_impl<T> {};
template <class T, int N> struct bare_impl<const METILE_AS(N) T> : bare_impl<T> {};
template <class T> using bare = typename bare_impl<T>::type;

template <class T> struct remove_ref_impl { using type = T; };
template <class T> struct remove_ref_impl<T&> { using type = T; };
template <class T> struct remove_ref_impl<T&&> { using type = T; };
template <class T> using remove_ref = typename remove_ref_impl<T>::type;
template <class T> using value_of = bare<remove_ref<T>>;

template <class T> inline constexpr bool is_const_obj = false;
template <class T> inline constexpr bool is_const_obj<const T> = true;
template <class T> inline constexpr bool is_const_obj<const T&> = true;
template <class T> inline constexpr bool is_const_obj<const volatile T> = true;
template <class T> inline constexpr bool is_const_obj<const volatile T&> = true;
template <class T, int N> inline constexpr bool is_const_obj<const METILE_AS(N) T> = true;
template <class T, int N> inline constexpr bool is_const_obj<const METILE_AS(N) T&> = true;

template <class T> inline constexpr bool is_integral_impl = false;
template <> inline constexpr bool is_integral_impl<bool> = true;
template <> inline constexpr bool is_integral_impl<char> = true;
template <> inline constexpr bool is_integral_impl<signed char> = true;
template <> inline constexpr bool is_integral_impl<unsigned char> = true;
template <> inline constexpr bool is_integral_impl<short> = true;
template <> inline constexpr bool is_integral_impl<unsigned short> = true;
template <> inline constexpr bool is_integral_impl<int> = true;
template <> inline constexpr bool is_integral_impl<unsigned int> = true;
template <> inline constexpr bool is_integral_impl<long> = true;
template <> inline constexpr bool is_integral_impl<unsigned long> = true;
template <> inline constexpr bool is_integral_impl<long long> = true;
template <> inline constexpr bool is_integral_impl<unsigned long long> = true;
template <class T> inline constexpr bool is_integral = is_integral_impl<bare<T>>;

template <class T> inline constexpr bool is_builtin_float_impl = false;
template <> inline constexpr bool is_builtin_float_impl<_Float16> = true;
template <> inline constexpr bool is_builtin_float_impl<float> = true;
template <> inline constexpr bool is_builtin_float_impl<double> = true;
template <class T> inline constexpr bool is_builtin_float = is_builtin_float_impl<bare<T>>;

struct bfloat_t;
template <class T> inline constexpr bool is_float = is_builtin_float<T> || is_same<bare<T>, bfloat_t>;
template <class T> inline constexpr bool is_scalar = is_integral<T> || is_float<T>;
template <class T> inline constexpr bool is_arith_scalar = is_scalar<T> && !is_same<bare<T>, bool>;

template <class T> inline constexpr bool is_signed_integral = is_integral<T> && (bare<T>(-1) < bare<T>(0));

template <class T> constexpr bool is_pow2_size() { return (sizeof(T) & (sizeof(T) - 1)) == 0; }

template <class T> T declval_helper();

// Bit copy between equally sized trivially copyable values.
template <class To, class From> inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
  return __builtin_bit_cast(To, from);
}

// Round a float to bfloat16 bits with round-to-nearest-even; NaN stays NaN.
inline unsigned short float_to_bfloat_bits(float f) {
  u32 bits = __builtin_bit_cast(u32, f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((bits >> 16) | 0x0040u);
  u32 rounding = 0x7fffu + ((bits >> 16) & 1u);
  return (unsigned short)((bits + rounding) >> 16);
}

inline float bfloat_bits_to_float(unsigned short b) { return __builtin_bit_cast(float, (u32)b << 16); }

// Metal's bfloat: 16-bit brain float. It converts implicitly only to float;
// every other conversion (from float, half, integers; to half or integers) is
// explicit, as in MSL 3.1. Arithmetic between bfloats rounds the float result
// back to bfloat.
struct bfloat_t {
  unsigned short bits;

  bfloat_t() = default;
  template <class U>
    requires(is_scalar<U> && !is_same<bare<U>, bfloat_t>)
  explicit bfloat_t(const U& v) : bits(float_to_bfloat_bits(float(bare<U>(v)))) {}
  // Loads from another address space (device, constant, threadgroup).
  template <class Src>
    requires(is_same<bare<Src>, bfloat_t> && !is_same<Src, bfloat_t>)
  bfloat_t(const Src& other) : bits(other.bits) {}

  static bfloat_t from_bits(unsigned short b) {
    bfloat_t r;
    r.bits = b;
    return r;
  }

  template <class U, class Self>
    requires is_same<U, float>
  operator U(this const Self& self) {
    return bfloat_bits_to_float(self.bits);
  }
  template <class U, class Self>
    requires(is_scalar<U> && !is_same<U, float> && !is_same<U, bfloat_t>)
  explicit operator U(this const Self& self) {
    return U(bfloat_bits_to_float(self.bits));
  }

  // Stores into a bfloat in another address space (device/threadgroup memory).
  template <class Self>
    requires(!is_const_obj<Self>)
  Self&& operator=(this Self&& self, bfloat_t v) {
    self.bits = v.bits;
    return static_cast<Self&&>(self);
  }

  float f() const { return bfloat_bits_to_float(bits); }

#define METILE_BF_BINOP(op)                                                                   \
  friend bfloat_t operator op(bfloat_t a, bfloat_t b) { return bfloat_t(a.f() op b.f()); }   \
  template <class Self>                                                                       \
    requires(!is_const_obj<Self>)                                                             \
  friend Self&& operator op##=(Self&& self, bfloat_t b)                                       \
    requires is_same<value_of<Self>, bfloat_t>                                                \
  {                                                                                           \
    self.bits = bfloat_t(bfloat_bits_to_float(self.bits) op b.f()).bits;                      \
    return static_cast<Self&&>(self);                                                         \
  }
  METILE_BF_BINOP(+)
  METILE_BF_BINOP(-)
  METILE_BF_BINOP(*)
  METILE_BF_BINOP(/)
#undef METILE_BF_BINOP
  friend bfloat_t operator-(bfloat_t a) { return from_bits((unsigned short)(a.bits ^ 0x8000u)); }
  friend bfloat_t operator+(bfloat_t a) { return a; }
  friend bool operator==(bfloat_t a, bfloat_t b) { return a.f() == b.f(); }
  friend bool operator!=(bfloat_t a, bfloat_t b) { return a.f() != b.f(); }
  friend bool operator<(bfloat_t a, bfloat_t b) { return a.f() < b.f(); }
  friend bool operator>(bfloat_t a, bfloat_t b) { return a.f() > b.f(); }
  friend bool operator<=(bfloat_t a, bfloat_t b) { return a.f() <= b.f(); }
  friend bool operator>=(bfloat_t a, bfloat_t b) { return a.f() >= b.f(); }
};

// Converts any scalar (bfloat included) to float without tripping bfloat's
// explicit-only rules; used inside the shim.
template <class T> inline float to_float(const T& v) {
  if constexpr (is_same<bare<T>, bfloat_t>) return bfloat_bits_to_float(v.bits);
  else return float(v);
}

// Converts between scalar types the way an explicit MSL cast does.
template <class To, class From> inline To convert_scalar(const From& v) {
  using F = bare<From>;
  if constexpr (is_same<To, F>) return v;
  else if constexpr (is_same<To, bfloat_t>) return bfloat_t(to_float(v));
  else if constexpr (is_same<F, bfloat_t>) return To(bfloat_bits_to_float(v.bits));
  else return To(v);
}

}  // namespace metile_emu

typedef metile_emu::bfloat_t bfloat;

// MSL literal suffixes: 1.5h is a half, 1.5bf a bfloat.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wuser-defined-literals"
#pragma clang diagnostic ignored "-Wreserved-user-defined-literal"
constexpr half operator""h(long double v) { return (half)v; }
constexpr half operator""h(unsigned long long v) { return (half)v; }
inline bfloat operator""bf(long double v) { return bfloat((float)v); }
inline bfloat operator""bf(unsigned long long v) { return bfloat((float)v); }
#pragma clang diagnostic pop
