// Memory checking: every device, constant and threadgroup access of a kernel
// is checked against the extent of the buffer or threadgroup allocation its
// pointer was derived from.
//
// Pointers carry their provenance in their top 16 bits (a *tag*): the host
// hands the kernel `tag << 48 | address` for each buffer argument, and the
// entry wrapper does the same for threadgroup memory. Pointer arithmetic,
// casts between pointer types and 64-bit offsets keep the tag, so a pointer
// that wanders into another buffer still names the one it came from. The
// process-wide extent table (owned by the host, `extents.rs`) maps each tag
// to the tagged address of its first byte and its length.
//
// The emulator compiles checked kernels in two steps: clang emits unoptimised
// LLVM IR, the host inserts a call to one of the `metile_emu_check_*`
// functions below before every load, store, atomic and memory intrinsic on
// device (address space 1), constant (2) or threadgroup (volatile) memory,
// and clang optimises the result (the checks inline). A check returns the
// untagged address to access, or ends the threadgroup with a record of the
// access that the host turns into an error naming the buffer, the offset and
// the MSL line. Code that reaches tagged memory some other way faults on the
// non-canonical address, which the host reports too.
//
// With METILE_EMU_CHECKS=0 nothing is tagged or checked.
#pragma once

#ifndef METILE_EMU_CHECKS
#define METILE_EMU_CHECKS 1
#endif
// A profiled build (profile.h) counts, after its check, every access the
// checks see; it is always a checked build.
#ifndef METILE_EMU_PROFILE
#define METILE_EMU_PROFILE 0
#endif

namespace metile_emu {

constexpr u32 tag_shift = 48;
constexpr u64 address_mask = (u64(1) << tag_shift) - 1;
// Tags below this one name launch arguments; mirrors FIRST_WORKER_TAG in extents.rs.
constexpr u32 first_worker_tag = 1 << 13;

// One entry of the host's extent table; mirrors `Extent` in extents.rs.
struct Extent {
  u64 tagged_base;  // tag << 48 | address of the first byte
  u64 bytes;        // 0 for a tag in no use
};

// What a failed check records for the host; mirrors `AccessRecord` in ffi.rs.
constexpr u32 access_write = 1;
constexpr u32 access_space_device = 0 << 1;
constexpr u32 access_space_constant = 1 << 1;
constexpr u32 access_space_threadgroup = 2 << 1;
constexpr u32 access_frames = 16;

struct AccessRecord {
  u64 pointer;
  u64 bytes;
  u32 flags;
  u32 thread_index;
  u64 frames[access_frames];  // return addresses, innermost first
};

// The host's table, handed over once when the library is loaded.
inline Extent* extent_table = nullptr;

// Program-scope `constant` variables (untagged, since no host pointer names
// them): the instrumentation defines this list in checked builds.
struct ConstantGlobal {
  const void METILE_AS(2) * start;
  u64 bytes;
};

[[noreturn]] inline void access_fault(u64 pointer, u64 bytes, u32 flags);
// Counts one access at an untagged address (profile.h).
inline void profile_access(u64 address, u64 bytes, u32 flags);

#if METILE_EMU_CHECKS
extern "C" const ConstantGlobal metile_emu_constant_globals[];
extern "C" const u64 metile_emu_constant_global_count;
#endif

// The address `pointer` names if `bytes` bytes from it lie inside the extent
// of its tag; a failed check does not return.
__attribute__((always_inline, nodebug)) inline u64 checked_address(u64 pointer, u64 bytes, u32 flags) {
  const Extent& extent = extent_table[pointer >> tag_shift];
  u64 offset = pointer - extent.tagged_base;
  if (__builtin_expect(offset > extent.bytes || extent.bytes - offset < bytes, 0)) access_fault(pointer, bytes, flags);
  return pointer & address_mask;
}

// Untagged constant-space pointers are fine inside a program-scope constant.
__attribute__((noinline, nodebug)) inline u64 checked_constant_global(u64 pointer, u64 bytes, u32 flags) {
#if METILE_EMU_CHECKS
  for (u64 i = 0; i < metile_emu_constant_global_count; ++i) {
    u64 start = (u64)metile_emu_constant_globals[i].start;
    u64 length = metile_emu_constant_globals[i].bytes;
    if (pointer >= start && pointer - start <= length && length - (pointer - start) >= bytes) return pointer;
  }
#endif
  access_fault(pointer, bytes, flags);
}

// Tags `address` (threadgroup memory or a buffer) with `tag`.
inline u64 tag_address(u64 address, u32 tag) {
#if METILE_EMU_CHECKS
  return ((u64)tag << tag_shift) | address;
#else
  (void)tag;
  return address;
#endif
}

// The address of `bytes` bytes at `pointer` in memory space `flags`:
// untagged threadgroup pointers are thread memory declared volatile, untagged
// constant pointers must lie in a program-scope constant.
__attribute__((always_inline, nodebug)) inline u64 checked_in_space(u64 pointer, u64 bytes, u32 flags) {
  u32 space = flags & ~access_write;
  if (space != access_space_device && (pointer >> tag_shift) == 0) {
    if (space == access_space_threadgroup) return pointer;
    return checked_constant_global(pointer, bytes, flags);
  }
  return checked_address(pointer, bytes, flags);
}

// checked_in_space, and in a profiled build the access counted: threadgroup
// memory only where the pointer is tagged (an untagged one is thread memory
// that a kernel declared volatile).
__attribute__((always_inline, nodebug)) inline u64 checked_and_counted(u64 pointer, u64 bytes, u32 flags) {
  u64 address = checked_in_space(pointer, bytes, flags);
#if METILE_EMU_PROFILE
  if ((flags & ~access_write) != access_space_threadgroup || (pointer >> tag_shift) != 0)
    profile_access(address, bytes, flags);
#endif
  return address;
}

// A plain pointer to the object behind a checked pointer, for shim code that
// must hand it to a compiler builtin (atomics): checks `sizeof(T)` bytes.
template <class T, class P> inline T* checked_object(P* pointer, bool write, u32 space) {
#if METILE_EMU_CHECKS
  return (T*)checked_and_counted((u64)pointer, sizeof(T), (write ? access_write : 0) | space);
#else
  (void)write;
  (void)space;
  return (T*)pointer;
#endif
}

// The memory space of an object type: device (1), constant (2), threadgroup
// (3, spelled volatile), or -1 for thread memory.
template <class T> inline constexpr int object_space = -1;
template <class T, int N> inline constexpr int object_space<METILE_AS(N) T> = N;
template <class T, int N> inline constexpr int object_space<const METILE_AS(N) T> = N;
template <class T> inline constexpr int object_space<volatile T> = 3;
template <class T> inline constexpr int object_space<const volatile T> = 3;

constexpr u32 space_flags(int space) {
  return space == 1 ? access_space_device : space == 2 ? access_space_constant : access_space_threadgroup;
}

// The object `object` refers to, in any memory space, as a plain reference
// of type T after one check covering all of it: shim code that copies a
// whole object (a vector) uses it instead of paying a check per element.
template <class T, class Src> __attribute__((always_inline, nodebug)) inline const T& plain_read(const Src& object) {
  if constexpr (object_space<Src> < 0) {
    return object;
  } else {
#if METILE_EMU_CHECKS
    return *(const T*)checked_and_counted((u64)&object, sizeof(T), space_flags(object_space<Src>));
#else
    return *(const T*)(u64)&object;
#endif
  }
}

template <class T, class Dst> __attribute__((always_inline, nodebug)) inline T& plain_write(Dst& object) {
  if constexpr (object_space<Dst> < 0) {
    return object;
  } else {
#if METILE_EMU_CHECKS
    return *(T*)checked_and_counted((u64)&object, sizeof(T), access_write | space_flags(object_space<Dst>));
#else
    return *(T*)(u64)&object;
#endif
  }
}

}  // namespace metile_emu

#if METILE_EMU_CHECKS
// Called by the instrumentation (never by kernel code); `flags` holds
// access_write. Each returns the untagged pointer to access.
extern "C" __attribute__((used, always_inline, nodebug, visibility("hidden"))) inline void METILE_AS(1) *
metile_emu_check_device(void METILE_AS(1) * pointer, metile_emu::u64 bytes, metile_emu::u32 flags) {
  metile_emu::u64 address =
      metile_emu::checked_address((metile_emu::u64)pointer, bytes, flags | metile_emu::access_space_device);
#if METILE_EMU_PROFILE
  metile_emu::profile_access(address, bytes, flags | metile_emu::access_space_device);
#endif
  return (void METILE_AS(1)*)address;
}

extern "C" __attribute__((used, always_inline, nodebug, visibility("hidden"))) inline void METILE_AS(2) *
metile_emu_check_constant(void METILE_AS(2) * pointer, metile_emu::u64 bytes, metile_emu::u32 flags) {
  return (void METILE_AS(2)*)metile_emu::checked_and_counted((metile_emu::u64)pointer, bytes,
                                                             flags | metile_emu::access_space_constant);
}

// An integer cast to a device pointer (an address a kernel read from memory):
// tagged with the launch argument whose buffer holds it, so the accesses
// through it are checked against that buffer. An address in no argument's
// buffer stays untagged, and its first access is reported as coming from no
// buffer argument of the launch.
extern "C" __attribute__((used, nodebug, visibility("hidden"))) inline metile_emu::u64
metile_emu_tag_loaded_address(metile_emu::u64 address) {
  using namespace metile_emu;
  if ((address >> tag_shift) != 0) return address;
  for (u32 tag = 1; tag < first_worker_tag; ++tag) {
    const Extent& extent = extent_table[tag];
    u64 base = extent.tagged_base & address_mask;
    if (extent.bytes != 0 && address >= base && address - base < extent.bytes) return extent.tagged_base + (address - base);
  }
  return address;
}

// Threadgroup memory is `volatile` here, so every volatile access comes
// through this check; untagged pointers are plain thread memory that a
// kernel declared volatile.
extern "C" __attribute__((used, always_inline, nodebug, visibility("hidden"))) inline void*
metile_emu_check_threadgroup(void* pointer, metile_emu::u64 bytes, metile_emu::u32 flags) {
  return (void*)metile_emu::checked_and_counted((metile_emu::u64)pointer, bytes,
                                                flags | metile_emu::access_space_threadgroup);
}
#endif
