// Metal atomics: atomic<T> for int, uint, bool, ulong and float, with the
// *_explicit free functions on device and threadgroup objects. Threadgroups
// run on different OS threads, so device atomics are real CPU atomics; Metal
// only allows memory_order_relaxed, which is what they use, and orders them
// with atomic_thread_fence (Metal 3.2). Each function checks the object's
// address (checks.h) before the builtin touches it.
#pragma once

namespace metal {

enum memory_order { memory_order_relaxed = 0, memory_order_seq_cst = 5 };

enum thread_scope { thread_scope_thread = 0, thread_scope_simdgroup = 1, thread_scope_threadgroup = 2, thread_scope_device = 3 };

// Metal 3.2's fence, which gives relaxed atomics acquire and release
// semantics. Threadgroups run on different OS threads, so the host's fence is
// what orders device memory between them (the threads of one threadgroup are
// fibers of one OS thread and already ordered).
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

template <class T> struct atomic {
  static_assert(metile_emu::is_same<T, int> || metile_emu::is_same<T, uint> || metile_emu::is_same<T, bool> ||
                    metile_emu::is_same<T, ulong> || metile_emu::is_same<T, float>,
                "Metal atomics hold int, uint, bool, ulong or float");
  using value_type = T;
  T value;
};

typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<float> atomic_float;

namespace detail {
// Float read-modify-write through a compare-and-swap loop on the bits.
template <class F> inline float atomic_float_update(float* p, F update) {
  metile_emu::u32* bits = (metile_emu::u32*)p;
  metile_emu::u32 old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(bits, &old, __builtin_bit_cast(metile_emu::u32, update(__builtin_bit_cast(float, old))),
                                      true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return __builtin_bit_cast(float, old);
}
template <class T> inline T atomic_min_update(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <class T> inline T atomic_max_update(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
}  // namespace detail

#define METILE_ATOMIC_FUNCTIONS(AS, SPACE)                                                                     \
  template <class T> inline T atomic_load_explicit(const AS atomic<T>* obj, memory_order) {              \
    return __atomic_load_n(metile_emu::checked_object<T>(&obj->value, false, SPACE), __ATOMIC_RELAXED);                                           \
  }                                                                                                     \
  template <class T> inline void atomic_store_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {           \
    __atomic_store_n(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                                             \
  }                                                                                                     \
  template <class T> inline T atomic_exchange_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {           \
    return __atomic_exchange_n(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                                   \
  }                                                                                                     \
  template <class T>                                                                                    \
  inline bool atomic_compare_exchange_weak_explicit(AS atomic<T>* obj, thread T* expected, typename atomic<T>::value_type desired,    \
                                                    memory_order, memory_order) {                       \
    return __atomic_compare_exchange_n(metile_emu::checked_object<T>(&obj->value, true, SPACE), expected, desired, true, __ATOMIC_RELAXED,      \
                                       __ATOMIC_RELAXED);                                               \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_add_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    if constexpr (metile_emu::is_same<T, float>)                                                         \
      return detail::atomic_float_update(metile_emu::checked_object<float>(&obj->value, true, SPACE), [v](float old) { return old + v; });      \
    else return __atomic_fetch_add(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                               \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_sub_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    if constexpr (metile_emu::is_same<T, float>)                                                         \
      return detail::atomic_float_update(metile_emu::checked_object<float>(&obj->value, true, SPACE), [v](float old) { return old - v; });      \
    else return __atomic_fetch_sub(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                               \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_and_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    return __atomic_fetch_and(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                                    \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_or_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {           \
    return __atomic_fetch_or(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                                     \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_xor_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    return __atomic_fetch_xor(metile_emu::checked_object<T>(&obj->value, true, SPACE), v, __ATOMIC_RELAXED);                                    \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_min_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    return detail::atomic_min_update(metile_emu::checked_object<T>(&obj->value, true, SPACE), v);                                                \
  }                                                                                                     \
  template <class T> inline T atomic_fetch_max_explicit(AS atomic<T>* obj, typename atomic<T>::value_type v, memory_order) {          \
    return detail::atomic_max_update(metile_emu::checked_object<T>(&obj->value, true, SPACE), v);                                                \
  }
METILE_ATOMIC_FUNCTIONS(device, metile_emu::access_space_device)
METILE_ATOMIC_FUNCTIONS(threadgroup, metile_emu::access_space_threadgroup)
#undef METILE_ATOMIC_FUNCTIONS

}  // namespace metal
