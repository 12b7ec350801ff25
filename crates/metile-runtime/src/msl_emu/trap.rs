//! Turning faults in kernel code into errors instead of a dead process.
//!
//! While a threadgroup runs, a thread-local record describes it. A process
//! signal handler (SIGSEGV, SIGBUS, SIGFPE; installed once, chaining to the
//! previous handler for every fault that is not ours) classifies a fault in
//! kernel code — a fiber stack overflow, a wild address (including a tagged
//! pointer that reached memory without a check), an integer division by
//! zero — stores that
//! in the record, and redirects the faulting thread to the kernel library's
//! `metile_emu_abort_after_fault` on a spare stack. That function ends the
//! group like any other error and `run_group` returns normally.
//!
//! Linux on x86-64 and AArch64 only; elsewhere faults keep their default effect.

use std::cell::Cell;

/// What went wrong, as the handler saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A fiber ran into the guard page below its stack.
    StackOverflow { thread: usize },
    /// Any other bad address.
    BadAddress { address: usize },
    /// Integer division by zero or overflow (SIGFPE).
    Arithmetic,
}

/// The threadgroup running on this thread, for the fault handler.
pub(crate) struct ActiveGroup {
    /// Address of the kernel library's `metile_emu_abort_after_fault`.
    pub resume_at: usize,
    /// Top of a stack no fiber uses, 16-byte aligned.
    pub spare_stack_top: usize,
    /// Fiber stacks: base, stride, guard bytes at the bottom of each, count.
    pub fiber_base: usize,
    pub fiber_stride: usize,
    pub fiber_guard: usize,
    pub fiber_count: usize,
    pub fault: Cell<Option<Fault>>,
    /// Program counter of the faulting instruction.
    pub fault_pc: Cell<usize>,
}

impl ActiveGroup {
    fn classify(&self, signal: i32, address: usize) -> Fault {
        #[cfg(target_os = "linux")]
        if signal == libc::SIGFPE {
            return Fault::Arithmetic;
        }
        let _ = signal;
        if address >= self.fiber_base && self.fiber_stride > 0 {
            let thread = (address - self.fiber_base) / self.fiber_stride;
            let within = (address - self.fiber_base) % self.fiber_stride;
            if thread < self.fiber_count && within < self.fiber_guard {
                return Fault::StackOverflow { thread };
            }
        }
        Fault::BadAddress { address }
    }
}

thread_local! {
    static ACTIVE: Cell<*const ActiveGroup> = const { Cell::new(std::ptr::null()) };
}

/// Clears the thread's record when the group ends, however it ends.
struct ActiveScope;

impl Drop for ActiveScope {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(std::ptr::null()));
    }
}

/// Whether faults can be caught on this host.
pub(crate) const SUPPORTED: bool = cfg!(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// Runs `f` (one `run_group` call) with `active` visible to the fault handler.
pub(crate) fn with_active<R>(active: &ActiveGroup, f: impl FnOnce() -> R) -> R {
    if !SUPPORTED || !install_handlers() {
        return f();
    }
    let pointer = (active as *const ActiveGroup).cast::<ActiveGroup>();
    ACTIVE.with(|a| a.set(pointer));
    let _scope = ActiveScope;
    f()
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod handler {
    use super::ACTIVE;
    use std::sync::OnceLock;

    const SIGNALS: [libc::c_int; 3] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE];

    /// The handlers that were installed before ours, one per entry of SIGNALS.
    struct Previous([libc::sigaction; 3]);
    // Plain data written once before any handler can read it.
    unsafe impl Sync for Previous {}
    unsafe impl Send for Previous {}

    static PREVIOUS: OnceLock<Option<Previous>> = OnceLock::new();

    pub(super) fn install() -> bool {
        PREVIOUS
            .get_or_init(|| {
                // SAFETY: zeroed sigaction is a valid "no handler" value, and
                // the structures passed to sigaction are fully initialised.
                unsafe {
                    let mut previous: [libc::sigaction; 3] = std::mem::zeroed();
                    for (i, &signal) in SIGNALS.iter().enumerate() {
                        let mut action: libc::sigaction = std::mem::zeroed();
                        action.sa_sigaction = on_fault as *const () as usize;
                        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                        libc::sigemptyset(&mut action.sa_mask);
                        if libc::sigaction(signal, &action, &mut previous[i]) != 0 {
                            return None;
                        }
                    }
                    Some(Previous(previous))
                }
            })
            .is_some()
    }

    extern "C" fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
        let active = ACTIVE.try_with(|a| a.get()).unwrap_or(std::ptr::null());
        if !active.is_null() && !info.is_null() && !context.is_null() {
            // SAFETY: the record outlives the run_group call it was set for,
            // and the kernel passes a valid siginfo and ucontext.
            unsafe {
                let active = &*active;
                let address = (*info).si_addr() as usize;
                active.fault.set(Some(active.classify(signal, address)));
                active.fault_pc.set(program_counter(context.cast()));
                redirect(context.cast(), active.resume_at, active.spare_stack_top);
            }
            return;
        }
        chain(signal, info, context);
    }

    unsafe fn program_counter(context: *mut libc::ucontext_t) -> usize {
        #[cfg(target_arch = "x86_64")]
        return (*context).uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
        #[cfg(target_arch = "aarch64")]
        return (*context).uc_mcontext.pc as usize;
    }

    /// Resumes the interrupted thread in `target` on the spare stack, as if
    /// `target` had just been called.
    unsafe fn redirect(context: *mut libc::ucontext_t, target: usize, stack_top: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let registers = &mut (*context).uc_mcontext.gregs;
            registers[libc::REG_RIP as usize] = target as i64;
            registers[libc::REG_RSP as usize] = (stack_top - 8) as i64;
        }
        #[cfg(target_arch = "aarch64")]
        {
            let machine = &mut (*context).uc_mcontext;
            machine.pc = target as u64;
            machine.sp = stack_top as u64;
            machine.regs[30] = 0;
        }
    }

    /// Hands a fault that is not ours to whoever handled it before.
    fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
        let Some(Some(previous)) = PREVIOUS.get() else {
            return;
        };
        let Some(index) = SIGNALS.iter().position(|&s| s == signal) else {
            return;
        };
        let action = &previous.0[index];
        let handler = action.sa_sigaction;
        // SAFETY: calling the previously installed handler with the
        // arguments it was registered for, or restoring the default action so
        // the fault repeats with its normal effect.
        unsafe {
            if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            } else if action.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(handler);
                f(signal, info, context);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                f(signal);
            }
        }
    }
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
fn install_handlers() -> bool {
    handler::install()
}

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
fn install_handlers() -> bool {
    false
}
