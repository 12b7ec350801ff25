// Fiber scheduler for one threadgroup, and the pieces the appended entry
// wrapper uses (launch descriptor, builtin values). Included exactly once, by
// the wrapper, after the kernel source.
//
// The host (Rust) owns all memory: fiber stacks, threadgroup memory and the
// scheduler's scratch area arrive in the launch descriptor, so a kernel
// library holds no state between launches and any number of worker threads
// can run groups of the same kernel at once.
#pragma once

extern "C" {
// Mirrors `LaunchDesc` in the Rust module msl_emu::ffi; keep both in sync and
// bump metile_emu::abi_version on any change.
struct MetileEmuLaunch {
  unsigned abi_version;
  unsigned threads_per_group;
  unsigned grid[3];
  unsigned threadgroup_tag_base;  // tag of threadgroup allocation 0 (then 1, 2, ...); 0: untagged
  const void* const* args;
  unsigned char* stacks;  // fiber i uses [stacks + i*stack_stride, stacks + (i+1)*stack_stride)
  size_t stack_stride;
  unsigned char* threadgroup_memory;
  size_t threadgroup_memory_bytes;
  unsigned char* scratch;
  size_t scratch_bytes;
  char* error_message;
  size_t error_capacity;
  metile_emu::AccessRecord* access_record;  // filled by a failed access check (status 3)
  // Receives each line a kernel logs (device_print), without the newline.
  void (*print)(void* context, const char* text, size_t length);
  void* print_context;
  // Where a profiled build counts (profile.h); null for every other build.
  metile_emu::ProfileState* profile;
};
}

namespace metile_emu {

constexpr u32 abi_version = 5;
constexpr u32 max_threads_per_group = 1024;

// Saved execution state of a fiber or of the scheduler (METILE_EMU_ASM_SWITCH
// is decided in base.h, which also includes <ucontext.h> when needed).
#if METILE_EMU_ASM_SWITCH
struct Context {
  void* sp;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

enum class FiberState : u32 { ready, running, at_barrier, at_simd, done };

struct Fiber {
  Context context;
  FiberState state;
  u32 site;
};

struct Group;
typedef void (*EntryFn)(Group* group, u32 thread_index);

struct Group {
  const MetileEmuLaunch* launch;
  EntryFn entry;
  Fiber* fibers;
  SimdGroup* simdgroups;
  u32* ready_ring;  // FIFO of runnable fibers; each fiber is queued at most once
  u32 ring_mask;    // ring capacity (a power of two >= thread_count) - 1
  u32 thread_count;
  u32 simdgroup_count;
  u32 ring_head;
  u32 ring_count;
  u32 live_count;  // threads that have not returned
  u32 current;
  u32 barrier_arrived;
  u32 barrier_site;
  u32 position[3];
  Context scheduler;
  int status;  // 0: all threads returned; 1: error in the launch's message buffer; 2: fault; 3: access check
};

}  // namespace metile_emu

// ---- context switch -------------------------------------------------------
// metile_emu_switch_context(&from->sp, to->sp) saves the callee-saved
// registers on the current stack, stores the stack pointer, loads the other
// stack pointer and restores. A new fiber's stack is prepared so that the
// first switch "returns" into metile_emu_fiber_trampoline, which calls the
// fiber body with its argument.
#if METILE_EMU_ASM_SWITCH
extern "C" void metile_emu_switch_context(void** save_sp, void* next_sp);
extern "C" void metile_emu_fiber_trampoline();
#if defined(__APPLE__)
#define METILE_ASM_SYMBOL(name) ".private_extern _" #name "\n_" #name ":\n"
#define METILE_ASM_GLOBAL(name) ".globl _" #name "\n"
#else
#define METILE_ASM_SYMBOL(name) ".hidden " #name "\n.type " #name ",@function\n" #name ":\n"
#define METILE_ASM_GLOBAL(name) ".globl " #name "\n"
#endif
#endif

#if METILE_EMU_ASM_SWITCH && defined(__x86_64__)
asm(".text\n.p2align 4\n" METILE_ASM_GLOBAL(metile_emu_switch_context) METILE_ASM_SYMBOL(metile_emu_switch_context)
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".p2align 4\n" METILE_ASM_GLOBAL(metile_emu_fiber_trampoline) METILE_ASM_SYMBOL(metile_emu_fiber_trampoline)
    "  movq %r12, %rdi\n  callq *%r13\n  ud2\n");
#elif METILE_EMU_ASM_SWITCH && defined(__aarch64__)
asm(".text\n.p2align 4\n" METILE_ASM_GLOBAL(metile_emu_switch_context) METILE_ASM_SYMBOL(metile_emu_switch_context)
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n"
    "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n  ret\n"
    ".p2align 4\n" METILE_ASM_GLOBAL(metile_emu_fiber_trampoline) METILE_ASM_SYMBOL(metile_emu_fiber_trampoline)
    "  mov x0, x19\n  blr x20\n  brk #0\n");
#endif

namespace metile_emu {

void fiber_main(Group* group);

#if METILE_EMU_ASM_SWITCH
inline void switch_context(Context* from, Context* to) { metile_emu_switch_context(&from->sp, to->sp); }

inline void prepare_context(Context* context, unsigned char* region, unsigned char* stack_top, Group* group) {
  (void)region;
  unsigned long top = (unsigned long)stack_top & ~15ul;
#if defined(__x86_64__)
  // Popped by the switch: r15 r14 r13 r12 rbx rbp, then the return address.
  void** sp = (void**)(top - 7 * sizeof(void*));
  for (int i = 0; i < 7; ++i) sp[i] = nullptr;
  sp[2] = (void*)&fiber_main;  // r13
  sp[3] = (void*)group;        // r12
  sp[6] = (void*)&metile_emu_fiber_trampoline;
#else
  // Restored by the switch: x19..x28, x29, x30 (return address), d8..d15.
  void** sp = (void**)(top - 160);
  for (int i = 0; i < 20; ++i) sp[i] = nullptr;
  sp[0] = (void*)group;        // x19
  sp[1] = (void*)&fiber_main;  // x20
  sp[11] = (void*)&metile_emu_fiber_trampoline;  // x30
#endif
  context->sp = sp;
}
#else
inline void switch_context(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }

inline void fiber_start_from_ucontext() { fiber_main(current_group); }

inline void prepare_context(Context* context, unsigned char* region, unsigned char* stack_top, Group* group) {
  (void)group;
  getcontext(&context->uc);
  // The host puts a guard page at the start of each region; 16 KiB covers
  // the largest page size in use.
  unsigned char* stack_base = region + 16384;
  context->uc.uc_stack.ss_sp = stack_base;
  context->uc.uc_stack.ss_size = (size_t)(stack_top - stack_base);
  context->uc.uc_link = nullptr;
  makecontext(&context->uc, &fiber_start_from_ucontext, 0);
}
#endif

// ---- error messages -------------------------------------------------------

struct MessageWriter {
  char* buffer;
  size_t capacity;
  size_t length;

  void text(const char* s) {
    while (*s && length + 1 < capacity) buffer[length++] = *s++;
    if (capacity) buffer[length < capacity ? length : capacity - 1] = 0;
  }
  void number(u64 value) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = char('0' + value % 10);
      value /= 10;
    } while (value);
    char s[24];
    for (int i = 0; i < n; ++i) s[i] = digits[n - 1 - i];
    s[n] = 0;
    text(s);
  }
};

inline MessageWriter begin_message(Group* g) {
  MessageWriter w{g->launch->error_message, g->launch->error_capacity, 0};
  w.text("threadgroup (");
  w.number(g->position[0]);
  w.text(", ");
  w.number(g->position[1]);
  w.text(", ");
  w.number(g->position[2]);
  w.text("): ");
  return w;
}

// ---- scheduling -----------------------------------------------------------

inline void push_ready(Group* g, u32 fiber) {
  g->fibers[fiber].state = FiberState::ready;
  g->ready_ring[(g->ring_head + g->ring_count) & g->ring_mask] = fiber;
  ++g->ring_count;
}

inline u32 pop_ready(Group* g) {
  u32 fiber = g->ready_ring[g->ring_head];
  g->ring_head = (g->ring_head + 1) & g->ring_mask;
  --g->ring_count;
  return fiber;
}

inline void report_deadlock(Group* g) {
  u32 at_barrier = 0, at_simd = 0, done = 0, simd_site = 0;
  for (u32 i = 0; i < g->thread_count; ++i) {
    FiberState s = g->fibers[i].state;
    if (s == FiberState::at_barrier) ++at_barrier;
    if (s == FiberState::done) ++done;
    if (s == FiberState::at_simd) {
      if (at_simd == 0) simd_site = g->fibers[i].site;
      ++at_simd;
    }
  }
  MessageWriter w = begin_message(g);
  w.text("deadlock: ");
  w.number(at_barrier);
  w.text(" thread(s) wait at threadgroup_barrier");
  if (at_barrier) {
    w.text(" (line ");
    w.number(site_line(g->barrier_site));
    w.text(")");
  }
  w.text(", ");
  w.number(at_simd);
  w.text(" wait at a SIMD-group operation");
  if (at_simd) {
    w.text(" (line ");
    w.number(site_line(simd_site));
    w.text(")");
  }
  w.text(", ");
  w.number(done);
  w.text(" have returned; every live thread must reach the same barriers and every live lane the same "
         "SIMD-group operations (divergent control flow)");
  g->status = 1;
}

// Leaves the current fiber for the next runnable one. When none is runnable
// the group is either finished or deadlocked; both end at the scheduler, and
// this fiber is never resumed.
inline void switch_away(Group* g, Fiber* self) {
  if (g->ring_count == 0) {
    if (g->live_count != 0 && g->status == 0) report_deadlock(g);
    switch_context(&self->context, &g->scheduler);
    __builtin_unreachable();
  }
  u32 next = pop_ready(g);
  g->current = next;
  g->fibers[next].state = FiberState::running;
#if METILE_EMU_ASM_SWITCH
  // Switching is dominated by the cache miss on the incoming fiber's saved
  // registers; start loading the one after it now.
  if (g->ring_count != 0) {
    const char* upcoming = (const char*)g->fibers[g->ready_ring[g->ring_head]].context.sp;
    __builtin_prefetch(upcoming);
    __builtin_prefetch(upcoming + 64);
  }
#endif
  switch_context(&self->context, &g->fibers[next].context);
}

[[noreturn]] inline void abort_group(Group* g) {
  g->status = 1;
  switch_context(&g->fibers[g->current].context, &g->scheduler);
  __builtin_unreachable();
}

// Entered on a spare stack when the host's fault handler has caught a memory
// fault or arithmetic trap in kernel code (the host then reports it): ends
// the group like any other error. Status 2 tells the host to use its record.
[[noreturn]] inline void abort_after_fault() {
  Group* g = current_group;
  g->status = 2;
  switch_context(&g->fibers[g->current].context, &g->scheduler);
  __builtin_unreachable();
}

// A failed access check: records the access and the return addresses on the
// fiber's stack (kernels are built with frame pointers, so the host can find
// the MSL line even when the access was in a shim function), then ends the
// group. Status 3 tells the host to read the record.
[[noreturn]] __attribute__((noinline, cold)) inline void access_fault(u64 pointer, u64 bytes, u32 flags) {
  Group* g = current_group;
  AccessRecord* record = g->launch->access_record;
  if (record) {
    record->pointer = pointer;
    record->bytes = bytes;
    record->flags = flags;
    record->thread_index = g->current;
    for (u32 i = 0; i < access_frames; ++i) record->frames[i] = 0;
    unsigned char* stack_low = g->launch->stacks + (size_t)g->current * g->launch->stack_stride;
    unsigned char* stack_high = stack_low + g->launch->stack_stride;
    void** frame = (void**)__builtin_frame_address(0);
    for (u32 i = 0; i < access_frames; ++i) {
      if ((unsigned char*)frame < stack_low || (unsigned char*)(frame + 2) > stack_high) break;
      record->frames[i] = (u64)frame[1];
      void** caller = (void**)frame[0];
      if (caller <= frame) break;
      frame = caller;
    }
  }
  g->status = 3;
  switch_context(&g->fibers[g->current].context, &g->scheduler);
  __builtin_unreachable();
}

// Threadgroup memory as the kernel sees it: `offset` bytes into the group's
// block, tagged as allocation `allocation` (parameters first, then variables
// declared in the kernel).
inline unsigned char* threadgroup_address(Group* g, u32 allocation, size_t offset) {
  u64 address = (u64)(g->launch->threadgroup_memory + offset);
  u32 base = g->launch->threadgroup_tag_base;
  return (unsigned char*)(base == 0 ? address : tag_address(address, base + allocation));
}

inline unsigned char* threadgroup_variable_address(u32 variable) {
  return threadgroup_address(current_group, metile_emu_threadgroup_parameter_count + variable,
                             metile_emu_threadgroup_variable_offsets[variable]);
}

[[noreturn]] inline void fail(const char* message, u32 site) {
  Group* g = current_group;
  MessageWriter w = begin_message(g);
  w.text("thread ");
  w.number(g->current);
  w.text(": ");
  w.text(message);
  w.text(" (line ");
  w.number(site_line(site));
  w.text(")");
  abort_group(g);
}

// One line of Metal's os_log (the shim's metal_logging): formatted like
// printf and handed to the host, which prints each threadgroup's lines.
inline void device_log(const char* format, ...) {
  char line[1024];
  __builtin_va_list args;
  __builtin_va_start(args, format);
  int n = __builtin_vsnprintf(line, sizeof line, format, args);
  __builtin_va_end(args);
  if (n < 0) return;
  size_t length = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
  const MetileEmuLaunch* launch = current_group->launch;
  if (launch->print) launch->print(launch->print_context, line, length);
}

// A failed device_assert: ends the launch with the message (whose `%%` are the
// format escapes of Metal's spelling) and the MSL line of the check.
[[noreturn]] inline void device_assert_failed(const char* message, u32 site) {
  Group* g = current_group;
  MessageWriter w = begin_message(g);
  w.text("thread ");
  w.number(g->current);
  w.text(": device_assert failed: ");
  char unescaped[512];
  size_t n = 0;
  for (const char* c = message; *c && n + 1 < sizeof unescaped; ++c) {
    if (c[0] == '%' && c[1] == '%') ++c;
    unescaped[n++] = *c;
  }
  unescaped[n] = 0;
  w.text(unescaped);
  w.text(" at line ");
  w.number(site_line(site));
  abort_group(g);
}

inline u32 current_thread_index() { return current_group->current; }
inline ProfileState* profile_state() { return current_group->launch->profile; }

// A synchronisation point of simdgroup `sg` (profile.h).
inline void profile_sync_simdgroup(Group* g, u32 sg) {
#if METILE_EMU_PROFILE
  u32 first = sg * simd_width, lanes = g->thread_count - first;
  profile_flush_simdgroup(g->launch->profile, first, lanes < simd_width ? lanes : simd_width);
#else
  (void)g;
  (void)sg;
#endif
}

inline void profile_sync_group(Group* g) {
  for (u32 sg = 0; sg < g->simdgroup_count; ++sg) profile_sync_simdgroup(g, sg);
}
inline u32 current_threads_per_group() { return current_group->thread_count; }

inline void release_barrier(Group* g) {
#if METILE_EMU_PROFILE
  profile_count(pc_threadgroup_barriers);
  profile_sync_group(g);
#endif
  g->barrier_arrived = 0;
  for (u32 i = 0; i < g->thread_count; ++i)
    if (g->fibers[i].state == FiberState::at_barrier) push_ready(g, i);
}

inline void threadgroup_barrier_wait(u32 site) {
  Group* g = current_group;
  Fiber* self = &g->fibers[g->current];
  if (g->barrier_arrived == 0) {
    g->barrier_site = site;
  } else if (site != g->barrier_site) {
    MessageWriter w = begin_message(g);
    w.text("threads reached different threadgroup_barrier calls (line ");
    w.number(site_line(g->barrier_site));
    w.text(" and line ");
    w.number(site_line(site));
    w.text("); a barrier must be reached by every live thread of the threadgroup");
    abort_group(g);
  }
  ++g->barrier_arrived;
  if (g->barrier_arrived == g->live_count) {
    release_barrier(g);
    return;
  }
  self->state = FiberState::at_barrier;
  self->site = site;
  switch_away(g, self);
}

// Runs the pending operation of `sg` and wakes its waiting lanes (except the
// running fiber, which simply carries on).
inline void complete_simd(Group* g, SimdGroup& sg, u32 sg_index) {
  u32 active = sg.arrived_mask;
#if METILE_EMU_PROFILE
  profile_count(pc_simd_operations);
  profile_sync_simdgroup(g, sg_index);
#endif
  sg.compute(sg, active);
  sg.arrived_mask = 0;
  for (u32 lane = 0; lane < simd_width; ++lane) {
    u32 fiber = sg_index * simd_width + lane;
    if (((active >> lane) & 1u) && fiber != g->current) push_ready(g, fiber);
  }
}

inline void simd_sync(SimdCompute compute, const void* in, u32 in_bytes, u32 param, void* out, u32 out_bytes,
                      u32 site) {
  Group* g = current_group;
  u32 thread_id = g->current;
  u32 sg_index = thread_id / simd_width, lane = thread_id % simd_width;
  SimdGroup& sg = g->simdgroups[sg_index];
  LaneSlot& slot = sg.lanes[lane];
  if (in_bytes) __builtin_memcpy(slot.in, in, in_bytes);
  slot.param = param;
  if (sg.arrived_mask == 0) {
    sg.site = site;
    sg.compute = compute;
  } else if (site != sg.site || compute != sg.compute) {
    MessageWriter w = begin_message(g);
    w.text("lanes of simdgroup ");
    w.number(sg_index);
    w.text(" reached different SIMD-group operations (line ");
    w.number(site_line(sg.site));
    w.text(" and line ");
    w.number(site_line(site));
    w.text("); SIMD-group functions must be called in uniform control flow");
    abort_group(g);
  }
  sg.arrived_mask |= 1u << lane;
  if (sg.arrived_mask == sg.live_mask) {
    complete_simd(g, sg, sg_index);
  } else {
    Fiber* self = &g->fibers[thread_id];
    self->state = FiberState::at_simd;
    self->site = site;
    switch_away(g, self);
  }
  if (out_bytes) __builtin_memcpy(out, slot.out, out_bytes);
}

inline void fiber_exit(Group* g) {
  u32 thread_id = g->current;
  Fiber* self = &g->fibers[thread_id];
  self->state = FiberState::done;
  --g->live_count;
  u32 sg_index = thread_id / simd_width;
  SimdGroup& sg = g->simdgroups[sg_index];
  sg.live_mask &= ~(1u << (thread_id % simd_width));
  // A returned thread_id no longer takes part: the others may now be complete.
  if (g->barrier_arrived != 0 && g->barrier_arrived == g->live_count) release_barrier(g);
  if (sg.arrived_mask != 0 && sg.arrived_mask == sg.live_mask) complete_simd(g, sg, sg_index);
  switch_away(g, self);
  __builtin_unreachable();
}

inline void fiber_main(Group* g) {
  g->entry(g, g->current);
  fiber_exit(g);
}

// ---- scratch layout and group execution ------------------------------------

inline size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

struct ScratchLayout {
  size_t fibers, simdgroups, ring, total;
};

inline u32 ring_capacity(u32 threads) {
  u32 capacity = 1;
  while (capacity < threads) capacity *= 2;
  return capacity;
}

inline ScratchLayout scratch_layout(u32 threads) {
  u32 sgs = (threads + simd_width - 1) / simd_width;
  ScratchLayout l;
  l.fibers = align_up(sizeof(Group), 64);
  l.simdgroups = align_up(l.fibers + threads * sizeof(Fiber), 64);
  l.ring = align_up(l.simdgroups + sgs * sizeof(SimdGroup), 64);
  l.total = align_up(l.ring + ring_capacity(threads) * sizeof(u32), 64) + 64;  // + room to align the base
  return l;
}

inline size_t scratch_bytes(u32 threads) { return scratch_layout(threads).total; }

inline int launch_error(const MetileEmuLaunch* launch, const char* message) {
  MessageWriter w{launch->error_message, launch->error_capacity, 0};
  w.text(message);
  return 1;
}

inline int run_group(const MetileEmuLaunch* launch, u32 gx, u32 gy, u32 gz, EntryFn entry) {
  if (launch->abi_version != abi_version) return launch_error(launch, "emulator ABI version mismatch");
  u32 threads = launch->threads_per_group;
  if (threads == 0 || threads > max_threads_per_group)
    return launch_error(launch, "threads per threadgroup must be between 1 and 1024");
  ScratchLayout layout = scratch_layout(threads);
  if (launch->scratch == nullptr || launch->scratch_bytes < layout.total || launch->stacks == nullptr)
    return launch_error(launch, "launch scratch memory or fiber stacks missing or too small");

  unsigned char* base = (unsigned char*)align_up((size_t)launch->scratch, 64);
  Group* g = (Group*)base;
  __builtin_memset(base, 0, layout.ring);
  g->launch = launch;
  g->entry = entry;
  g->fibers = (Fiber*)(base + layout.fibers);
  g->simdgroups = (SimdGroup*)(base + layout.simdgroups);
  g->ready_ring = (u32*)(base + layout.ring);
  g->thread_count = threads;
  g->ring_mask = ring_capacity(threads) - 1;
  g->simdgroup_count = (threads + simd_width - 1) / simd_width;
  g->live_count = threads;
  g->position[0] = gx;
  g->position[1] = gy;
  g->position[2] = gz;
  // Poison, as a GPU's threadgroup memory holds garbage: all-ones bytes read
  // as NaN in every float type and -1 in signed integers.
  if (launch->threadgroup_memory_bytes)
    __builtin_memset(launch->threadgroup_memory, 0xff, launch->threadgroup_memory_bytes);

  Group* previous = current_group;
  current_group = g;
#if METILE_EMU_PROFILE
  if (launch->profile) launch->profile->threadgroup_base = (u64)launch->threadgroup_memory;
#endif
  for (u32 sg = 0; sg < g->simdgroup_count; ++sg) {
    u32 lanes = threads - sg * simd_width;
    g->simdgroups[sg].live_mask = lanes >= simd_width ? 0xffffffffu : (1u << lanes) - 1u;
  }
  for (u32 i = 0; i < threads; ++i) {
    // Stagger the stack tops ("cache colouring"): with equal offsets every
    // fiber's hot frames would map to the same cache sets.
    size_t colour = (size_t)(i % 64) * 64;
    unsigned char* top = launch->stacks + (size_t)(i + 1) * launch->stack_stride - colour;
    prepare_context(&g->fibers[i].context, launch->stacks + (size_t)i * launch->stack_stride, top, g);
    push_ready(g, i);
  }
  u32 first = pop_ready(g);
  g->current = first;
  g->fibers[first].state = FiberState::running;
  switch_context(&g->scheduler, &g->fibers[first].context);
#if METILE_EMU_PROFILE
  if (g->status == 0) {
    profile_sync_group(g);
    profile_count(pc_threadgroups);
    profile_count(pc_threads, threads);
  }
#endif
  current_group = previous;
  return g->status;
}

// Value of a kernel's builtin attribute parameter; converts to whichever type
// the kernel declared (uint, ushort, uint2, uint3, ushort3, ...).
struct BuiltinValue {
  u32 v[3];
  template <class T> operator T() const {
    if constexpr (is_vector<T>) {
      T r;
      for (int i = 0; i < component_count<T>; ++i) r.e[i] = element_of<T>(v[i]);
      return r;
    } else {
      return T(v[0]);
    }
  }
};

enum class BuiltinKind {
  threadgroup_position_in_grid,
  threadgroups_per_grid,
  thread_position_in_threadgroup,
  threads_per_threadgroup,
  thread_position_in_grid,
  threads_per_grid,
  thread_index_in_threadgroup,
  thread_index_in_simdgroup,
  simdgroup_index_in_threadgroup,
  simdgroups_per_threadgroup,
  threads_per_simdgroup,
};

inline BuiltinValue builtin_value(Group* g, u32 tid, BuiltinKind kind) {
  const unsigned* grid = g->launch->grid;
  u32 n = g->thread_count;
  switch (kind) {
    case BuiltinKind::threadgroup_position_in_grid: return {{g->position[0], g->position[1], g->position[2]}};
    case BuiltinKind::threadgroups_per_grid: return {{grid[0], grid[1], grid[2]}};
    case BuiltinKind::thread_position_in_threadgroup: return {{tid, 0, 0}};
    case BuiltinKind::threads_per_threadgroup: return {{n, 1, 1}};
    case BuiltinKind::thread_position_in_grid: return {{g->position[0] * n + tid, g->position[1], g->position[2]}};
    case BuiltinKind::threads_per_grid: return {{grid[0] * n, grid[1], grid[2]}};
    case BuiltinKind::thread_index_in_threadgroup: return {{tid, 0, 0}};
    case BuiltinKind::thread_index_in_simdgroup: return {{tid % simd_width, 0, 0}};
    case BuiltinKind::simdgroup_index_in_threadgroup: return {{tid / simd_width, 0, 0}};
    case BuiltinKind::simdgroups_per_threadgroup: return {{g->simdgroup_count, 0, 0}};
    case BuiltinKind::threads_per_simdgroup: return {{simd_width, 0, 0}};
  }
  return {{0, 0, 0}};
}

}  // namespace metile_emu
