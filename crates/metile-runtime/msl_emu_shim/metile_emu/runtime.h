// Interface between the shim's SIMD-group/barrier functions and the fiber
// scheduler (defined in runtime_impl.h, which the appended entry wrapper
// includes, so everything ends up in one translation unit).
//
// A threadgroup runs on one OS thread; each GPU thread is a fiber that runs
// until it blocks at a barrier or SIMD-group operation. SIMD-group operations
// exchange values through per-lane slots: every live lane of the simdgroup
// publishes its input, and the last lane to arrive runs the operation for all
// of them and writes each lane's result into its output slot. A lane reads its
// result as soon as it resumes, before it can reach the next operation, and
// the next operation cannot complete until every live lane has arrived, so
// one slot per lane is enough.
#pragma once

namespace metile_emu {

constexpr u32 simd_width = 32;
constexpr u32 slot_bytes = 32;

struct LaneSlot {
  alignas(16) unsigned char in[slot_bytes];
  alignas(16) unsigned char out[slot_bytes];
  u32 param;
};

struct SimdGroup;
// Runs a SIMD-group operation once every live lane has published its input.
// `active` has one bit per participating lane.
typedef void (*SimdCompute)(SimdGroup& sg, u32 active);

struct SimdGroup {
  LaneSlot lanes[simd_width];
  u32 live_mask;     // lanes whose thread has not returned
  u32 arrived_mask;  // lanes waiting at the current operation
  u32 site;          // call site of the current operation
  SimdCompute compute;
};

struct Group;

// Per-worker pointer to the threadgroup being run; fibers never migrate
// between OS threads, so this is stable for the whole group.
inline thread_local Group* current_group = nullptr;

inline u32 current_thread_index();
inline u32 current_threads_per_group();
[[noreturn]] inline void fail(const char* message, u32 site);
inline void device_log(const char* format, ...);
[[noreturn]] inline void device_assert_failed(const char* message, u32 site);
inline void threadgroup_barrier_wait(u32 site);
// Publishes `in` (in_bytes <= slot_bytes) and `param` for this lane, waits for
// the simdgroup, then copies this lane's result (out_bytes) into `out`.
inline void simd_sync(SimdCompute compute, const void* in, u32 in_bytes, u32 param, void* out, u32 out_bytes,
                      u32 site);

inline u32 lane_index() { return current_thread_index() % simd_width; }

// Threadgroup variables declared inside a kernel (`threadgroup float buf[256];`)
// are rewritten by the emulator into references to this: the variable's
// storage in the group's threadgroup memory, after the parameters'. Offsets
// and the parameter count come from the entry wrapper.
extern "C" const unsigned long metile_emu_threadgroup_variable_offsets[];
extern "C" const u32 metile_emu_threadgroup_parameter_count;
inline unsigned char* threadgroup_variable_address(u32 variable);
template <class T> inline threadgroup T* threadgroup_variable(u32 variable) {
  return (threadgroup T*)threadgroup_variable_address(variable);
}

template <class T> inline T load_slot(const unsigned char* bytes) {
  static_assert(sizeof(T) <= slot_bytes, "value too large for a SIMD-group exchange slot");
  T v;
  __builtin_memcpy((void*)&v, bytes, sizeof(T));
  return v;
}
template <class T> inline void store_slot(unsigned char* bytes, const T& v) {
  __builtin_memcpy(bytes, (const void*)&v, sizeof(T));
}

}  // namespace metile_emu

// A failed device_assert in meTile's MSL ends the launch here (on Metal it is
// only logged: see the kernel's preamble, which defines it when this does not).
#define metile_device_assert_failed(message) ::metile_emu::device_assert_failed(message, METILE_SITE)

namespace metal {

enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
inline constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }

// Every live thread of the threadgroup must reach the same barrier call.
// Threads that have returned no longer take part (as on Apple GPUs).
inline void threadgroup_barrier(mem_flags, metile_emu::u32 site = METILE_SITE) {
  metile_emu::threadgroup_barrier_wait(site);
}

namespace detail {
inline void simd_barrier_compute(metile_emu::SimdGroup&, metile_emu::u32) {
#if METILE_EMU_PROFILE
  metile_emu::profile_count(metile_emu::pc_simdgroup_barriers);
#endif
}
}  // namespace detail

// Synchronises the live lanes of the simdgroup. Lanes of a simdgroup run as
// separate fibers, so code that shares threadgroup memory inside a simdgroup
// needs this barrier here just as the Metal specification requires.
inline void simdgroup_barrier(mem_flags, metile_emu::u32 site = METILE_SITE) {
  metile_emu::simd_sync(&detail::simd_barrier_compute, nullptr, 0, 0, nullptr, 0, site);
}

}  // namespace metal
