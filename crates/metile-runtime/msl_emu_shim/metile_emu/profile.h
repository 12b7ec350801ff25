// Profiling: what a kernel does to memory and to the simdgroup matrix units,
// counted while it runs. Only a profiled build (METILE_EMU_PROFILE=1, which
// the host builds as a variant of the checked build, cached apart) contains
// any of this; every other build compiles the hooks away.
//
// Every access the memory checks see is counted per thread (loads and stores,
// bytes, by memory space). Threadgroup accesses are also logged per thread
// between synchronisation points (threadgroup barriers and every SIMD-group
// operation, simdgroup_multiply_accumulate included); at each such point the
// n-th logged access of every lane of a simdgroup is taken as one access
// instruction, as converged code runs the same accesses on every lane, and
// its bank-conflict degree is computed for 32 banks of 4 bytes (Apple does not
// document its banks: an assumption): the number of distinct 4-byte words
// that fall in the most-used bank, a broadcast of one word costing nothing
// more. Lanes that logged different numbers of accesses in one interval
// (divergent control flow, or a lane that returned) are counted; their n-th
// accesses are still paired, the shorter lanes taking no part in the later
// instructions, as inactive lanes of a GPU instruction.
//
// simdgroup_load/simdgroup_store count as one access per lane (its two
// elements) and one matrix instruction per simdgroup, whatever the element
// accesses inside them; simdgroup_multiply_accumulate, matmul2d runs,
// barriers and SIMD-group operations are counted where they complete.
#pragma once

#ifndef METILE_EMU_PROFILE
#define METILE_EMU_PROFILE 0
#endif

namespace metile_emu {

// Mirrors COUNTERS in the Rust module msl_emu::profile, in order.
enum ProfileCounter : u32 {
  pc_threadgroup_loads,
  pc_threadgroup_load_bytes,
  pc_threadgroup_stores,
  pc_threadgroup_store_bytes,
  pc_device_loads,
  pc_device_load_bytes,
  pc_device_stores,
  pc_device_store_bytes,
  pc_constant_loads,
  pc_constant_load_bytes,
  pc_threadgroup_load_instructions,
  pc_threadgroup_load_wavefronts,
  pc_threadgroup_store_instructions,
  pc_threadgroup_store_wavefronts,
  pc_threadgroup_min_wavefronts,
  pc_unpaired_threadgroup_accesses,
  pc_divergent_intervals,
  pc_oversized_instructions,
  pc_simdgroup_mma,
  pc_matrix_loads_threadgroup,
  pc_matrix_loads_device,
  pc_matrix_stores_threadgroup,
  pc_matrix_stores_device,
  pc_matmul2d_runs,
  pc_threadgroup_barriers,
  pc_simdgroup_barriers,
  pc_simd_operations,
  pc_threadgroups,
  pc_threads,
  profile_counter_count
};

constexpr u32 profile_banks = 32;
constexpr u32 profile_bank_bytes = 4;

// One logged access of a lane: threadgroup memory (offset from the group's
// threadgroup memory) or a device matrix access (address), a second element
// `second` bytes after the first for matrix accesses, and the return address
// of the counting call (`site`) and of its caller (`caller`): the host maps
// the first of them that lies in the kernel's source to the MSL line (the
// caller's when the access was made in a shim function that was not inlined).
constexpr u32 log_write = 1, log_matrix = 2, log_device = 4;
struct ProfileAccess {
  u64 address;
  int second;
  unsigned short bytes;
  unsigned char flags;
  unsigned char pad;
  u64 site;
  u64 caller;
};

struct ProfileWordSlot {
  u32 word;
  u32 stamp;
};

// What the threadgroup instructions of one access site (and direction) cost;
// an open-addressing table keyed by (site, write), site 0 collecting the
// sites past the table's half.
struct ProfileSite {
  u64 site;
  u64 caller;
  u64 instructions;
  u64 wavefronts;
  u64 min_wavefronts;
  u32 write;
  u32 used;
};

// Owned by the host, one per worker thread; mirrors `ProfileState` in
// msl_emu::profile. `log` holds `log_capacity` entries per thread.
struct ProfileState {
  u64 counters[profile_counter_count];
  ProfileAccess* log;
  u32* log_length;
  ProfileWordSlot* words;  // open-addressing set of the words of one instruction
  ProfileSite* sites;
  u32 log_capacity;
  u32 word_capacity;       // a power of two
  u32 stamp;               // marks the slots of the instruction being analysed
  u32 mute;                // > 0 inside a shim function that records its own accesses
  u32 site_capacity;       // a power of two
  u32 sites_used;
  u32 bank_words[profile_banks];
  u64 threadgroup_base;
};

inline ProfileState* profile_state();
inline u32 current_thread_index();

#if METILE_EMU_PROFILE
inline void profile_count(ProfileCounter counter, u64 amount = 1) {
  ProfileState* p = profile_state();
  if (p) p->counters[counter] += amount;
}

// The return addresses of a counting function (`site`) and of its caller;
// profiled builds keep frame pointers, so the walk is safe.
#define METILE_PROFILE_SITE ::metile_emu::u64 site = (::metile_emu::u64)__builtin_return_address(0), \
                            caller = (::metile_emu::u64)__builtin_return_address(1)

inline void profile_log(ProfileState* p, u64 address, int second, u64 bytes, u32 flags, u64 site, u64 caller) {
  u32 tid = current_thread_index();
  u32& length = p->log_length[tid];
  if (length == p->log_capacity) {
    ++p->counters[pc_unpaired_threadgroup_accesses];
    return;
  }
  p->log[(u64)tid * p->log_capacity + length] =
      ProfileAccess{address, second, (unsigned short)(bytes > 0xffff ? 0xffff : bytes), (unsigned char)flags, 0, site, caller};
  ++length;
}

// One access of `bytes` bytes at `address` (untagged) in the memory space of
// `flags` (checks.h's access flags), counted for the running thread. Not
// inlined, so that its return address lies in the code that made the access.
__attribute__((noinline)) inline void profile_access(u64 address, u64 bytes, u32 flags) {
  METILE_PROFILE_SITE;
  ProfileState* p = profile_state();
  if (!p || p->mute) return;
  bool write = flags & access_write;
  switch (flags & ~access_write) {
    case access_space_device:
      p->counters[write ? pc_device_stores : pc_device_loads] += 1;
      p->counters[write ? pc_device_store_bytes : pc_device_load_bytes] += bytes;
      break;
    case access_space_constant:
      p->counters[pc_constant_loads] += 1;
      p->counters[pc_constant_load_bytes] += bytes;
      break;
    default:
      p->counters[write ? pc_threadgroup_stores : pc_threadgroup_loads] += 1;
      p->counters[write ? pc_threadgroup_store_bytes : pc_threadgroup_load_bytes] += bytes;
      profile_log(p, address - p->threadgroup_base, 0, bytes, write ? log_write : 0, site, caller);
  }
}

// simdgroup_load/simdgroup_store of this lane: its two elements, `elem`
// bytes each, at `first` and `second` (untagged).
__attribute__((noinline)) inline void profile_matrix_access(u64 first, u64 second, u64 elem, bool threadgroup_space,
                                                          bool write) {
  METILE_PROFILE_SITE;
  ProfileState* p = profile_state();
  if (!p || p->mute) return;
  int delta = (int)((long long)second - (long long)first);
  if (threadgroup_space) {
    p->counters[write ? pc_threadgroup_stores : pc_threadgroup_loads] += 1;
    p->counters[write ? pc_threadgroup_store_bytes : pc_threadgroup_load_bytes] += 2 * elem;
    profile_log(p, first - p->threadgroup_base, delta, elem, log_matrix | (write ? log_write : 0), site, caller);
  } else {
    p->counters[write ? pc_device_stores : pc_device_loads] += 1;
    p->counters[write ? pc_device_store_bytes : pc_device_load_bytes] += 2 * elem;
    profile_log(p, first, delta, elem, log_matrix | log_device | (write ? log_write : 0), site, caller);
  }
}

// Silences the per-element accesses of a shim function that counted itself.
struct ProfileMute {
  ProfileState* p = profile_state();
  ProfileMute() {
    if (p) ++p->mute;
  }
  ~ProfileMute() {
    if (p) --p->mute;
  }
};

// Adds `word` to the current instruction's set; false if it was there already.
inline bool profile_insert_word(ProfileState* p, u32 word) {
  u32 mask = p->word_capacity - 1;
  for (u32 slot = (word * 2654435761u) & mask;; slot = (slot + 1) & mask) {
    ProfileWordSlot& s = p->words[slot];
    if (s.stamp != p->stamp) {
      s.word = word;
      s.stamp = p->stamp;
      return true;
    }
    if (s.word == word) return false;
  }
}

// The entry of (site, caller, write) in the site table.
inline ProfileSite& profile_site(ProfileState* p, u64 site, u64 caller, bool write) {
  u32 mask = p->site_capacity - 1;
  for (;;) {
    u64 key = (site ^ caller * 31) * 2 + write;
    for (u32 slot = (u32)(key * 0x9E3779B97F4A7C15ull >> 40) & mask;; slot = (slot + 1) & mask) {
      ProfileSite& s = p->sites[slot];
      if (s.used && s.site == site && s.caller == caller && s.write == (u32)write) return s;
      if (s.used) continue;
      // A new site while the table is half full goes to site 0 (which always finds room).
      if (site != 0 && p->sites_used >= p->site_capacity / 2 - 1) break;
      s = ProfileSite{site, caller, 0, 0, 0, (u32)write, 1};
      ++p->sites_used;
      return s;
    }
    site = caller = 0;
  }
}

// The lanes' n-th accesses as one instruction, of the kind of the first
// lane's: its bank-conflict degree. False when the lanes' accesses are not
// all of one kind (divergent code).
inline bool profile_instruction(ProfileState* p, const ProfileAccess* const* lanes, u32 count) {
  const ProfileAccess& lead = *lanes[0];
  bool write = lead.flags & log_write, uniform = true;
  for (u32 i = 1; i < count; ++i) uniform &= lanes[i]->flags == lead.flags;
  if (lead.flags & log_device) {
    p->counters[write ? pc_matrix_stores_device : pc_matrix_loads_device] += 1;
    return uniform;
  }
  if (lead.flags & log_matrix) p->counters[write ? pc_matrix_stores_threadgroup : pc_matrix_loads_threadgroup] += 1;
  if (++p->stamp == 0) {
    for (u32 i = 0; i < p->word_capacity; ++i) p->words[i].stamp = 0;
    p->stamp = 1;
  }
  for (u32 b = 0; b < profile_banks; ++b) p->bank_words[b] = 0;
  // At most half the set is filled, so probing always ends.
  u32 budget = p->word_capacity / 2, distinct = 0, degree = 0;
  bool oversized = false;
  for (u32 i = 0; i < count; ++i) {
    const ProfileAccess& a = *lanes[i];
    if (a.flags & log_device) continue;
    for (u32 element = 0; element < ((a.flags & log_matrix) ? 2u : 1u); ++element) {
      u64 start = a.address + (element ? (long long)a.second : 0);
      u64 first = start / profile_bank_bytes, last = (start + (a.bytes ? a.bytes : 1) - 1) / profile_bank_bytes;
      for (u64 word = first; word <= last; ++word) {
        if (distinct == budget) {
          oversized = true;
          break;
        }
        if (!profile_insert_word(p, (u32)word)) continue;
        ++distinct;
        u32& in_bank = p->bank_words[word % profile_banks];
        if (++in_bank > degree) degree = in_bank;
      }
    }
  }
  if (oversized) ++p->counters[pc_oversized_instructions];
  if (degree == 0) degree = 1;
  p->counters[write ? pc_threadgroup_store_instructions : pc_threadgroup_load_instructions] += 1;
  p->counters[write ? pc_threadgroup_store_wavefronts : pc_threadgroup_load_wavefronts] += degree;
  u32 minimum = (distinct + profile_banks - 1) / profile_banks;
  if (minimum == 0) minimum = 1;
  p->counters[pc_threadgroup_min_wavefronts] += minimum;
  ProfileSite& at = profile_site(p, lead.site, lead.caller, write);
  at.instructions += 1;
  at.wavefronts += degree;
  at.min_wavefronts += minimum;
  return uniform;
}

// A synchronisation point of the simdgroup whose threads are
// [first_thread, first_thread + lanes): pairs the accesses its lanes logged
// since the last one into instructions, then empties the logs.
inline void profile_flush_simdgroup(ProfileState* p, u32 first_thread, u32 lanes) {
  if (!p) return;
  u32 longest = 0, shortest = ~0u;
  for (u32 lane = 0; lane < lanes; ++lane) {
    u32 length = p->log_length[first_thread + lane];
    longest = length > longest ? length : longest;
    shortest = length < shortest ? length : shortest;
  }
  if (longest == 0) return;
  bool uniform = shortest == longest;
  const ProfileAccess* instruction[32];
  for (u32 n = 0; n < longest; ++n) {
    u32 count = 0;
    for (u32 lane = 0; lane < lanes; ++lane) {
      u32 tid = first_thread + lane;
      if (p->log_length[tid] > n) instruction[count++] = &p->log[(u64)tid * p->log_capacity + n];
    }
    uniform &= profile_instruction(p, instruction, count);
  }
  if (!uniform) ++p->counters[pc_divergent_intervals];
  for (u32 lane = 0; lane < lanes; ++lane) p->log_length[first_thread + lane] = 0;
}
#endif

}  // namespace metile_emu
