//! Stopping a long launch on the CPU backends (Ctrl-C).
//!
//! The host installs a *poller* on the thread that launches
//! ([`with_interrupt_poller`]): a function that says whether the user asked to stop
//! (metile-py checks Python's pending signals there). The cpu and msl-emu backends
//! run a launch through [`run_interruptible`]: its work goes to the rayon pool while
//! the launching thread waits and calls the poller every [`POLL_INTERVAL`]; once it
//! says stop, a flag tells the workers to give up between program instances or
//! threadgroups (the interpreter also at every loop iteration), and the launch
//! fails with `RuntimeError::Interrupted`. A launch that runs on the launching thread
//! itself (the interpreter's single-instance grids) calls the poller from its loops,
//! at most once per interval.
//!
//! A launch shorter than one interval never calls the poller, so the cost on the
//! hot path is the hand-off to the pool, which a parallel launch makes anyway.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the launching thread asks the poller while a launch runs.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Whether the user asked to stop; called on the launching thread only.
pub type Poller<'a> = &'a (dyn Fn() -> bool + Sync);

thread_local! {
    /// The poller installed on this thread, as a pointer that lives as long as the
    /// `with_interrupt_poller` call that set it.
    static POLLER: Cell<Option<*const (dyn Fn() -> bool + Sync + 'static)>> = const { Cell::new(None) };
}

/// Runs `f` with `poll` as this thread's poller: CPU-backend launches started by `f`
/// on this thread can be interrupted by it (see the module documentation).
pub fn with_interrupt_poller<R>(poll: Poller<'_>, f: impl FnOnce() -> R) -> R {
    // SAFETY: only the lifetime is erased. The pointer is read only by
    // `current_poller`, inside `f`, and the guard restores the previous value
    // before `poll` goes out of scope, even if `f` unwinds.
    let erased: *const (dyn Fn() -> bool + Sync + 'static) = unsafe { std::mem::transmute(poll) };
    struct Restore(Option<*const (dyn Fn() -> bool + Sync + 'static)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            POLLER.with(|p| p.set(self.0));
        }
    }
    let _restore = Restore(POLLER.with(|p| p.replace(Some(erased))));
    f()
}

fn current_poller() -> Option<Poller<'static>> {
    // SAFETY: the pointer is live for as long as it is installed (see above), and
    // callers use the reference only during the launch, inside that call.
    POLLER.with(|p| p.get()).map(|ptr| unsafe { &*ptr })
}

/// How the work of a launch asks whether to stop.
pub type StopCheck<'a> = &'a (dyn Fn() -> bool + Sync);

/// Runs `work` so that this thread's poller can stop it. `work` gets the check to
/// call between program instances or threadgroups; once it returns true it keeps
/// returning true. With no poller (or on a rayon worker, which must not block
/// waiting for the pool) the check is always false and `work` runs here.
///
/// `on_this_thread`: the launch is too small to be worth a hand-off; it runs here
/// and its own calls to the check poll the host, at most once per interval.
pub fn run_interruptible<R: Send + 'static>(
    on_this_thread: bool,
    work: impl FnOnce(StopCheck<'_>) -> R + Send,
) -> R {
    let never = || false;
    let Some(poll) = current_poller().filter(|_| rayon::current_thread_index().is_none()) else {
        return work(&never);
    };
    if on_this_thread {
        let calls = AtomicU64::new(0);
        let epoch: OnceLock<Instant> = OnceLock::new();
        let last_poll = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let inline = || {
            if stop.load(Ordering::Relaxed) {
                return true;
            }
            // The first call reads no clock: a launch that asks once (one program
            // without loops) costs nothing here.
            let call = calls.load(Ordering::Relaxed);
            calls.store(call + 1, Ordering::Relaxed);
            if call == 0 {
                return false;
            }
            let now = epoch.get_or_init(Instant::now).elapsed().as_nanos() as u64;
            if now.saturating_sub(last_poll.load(Ordering::Relaxed)) < POLL_INTERVAL.as_nanos() as u64 {
                return false;
            }
            last_poll.store(now, Ordering::Relaxed);
            let asked = poll();
            stop.store(asked, Ordering::Relaxed);
            asked
        };
        return work(&inline);
    }
    let shared = Arc::new(Handoff {
        stop: AtomicBool::new(false),
        done: Mutex::new(None),
        finished: Condvar::new(),
    });
    let job_shared = shared.clone();
    let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
        let check = || job_shared.stop.load(Ordering::Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| work(&check)));
        // `work` and everything it borrowed are gone now; from here on only the
        // shared state, which this job co-owns, is touched.
        let mut done = job_shared.done.lock().unwrap_or_else(|p| p.into_inner());
        *done = Some(result);
        job_shared.finished.notify_one();
    });
    // SAFETY: only the lifetime is erased. This thread does not return (nor unwind:
    // the poller's panics are caught) before the job has stored its result, and
    // the job stores it after it dropped everything it borrowed from this frame.
    let job: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(job) };
    // One hand-off and one wake-up, as a parallel iterator started from outside
    // the pool costs anyway.
    rayon::spawn(job);
    let mut poll_panic = None;
    let mut guard = shared.done.lock().unwrap_or_else(|p| p.into_inner());
    let result = loop {
        if let Some(result) = guard.take() {
            break result;
        }
        let (next, timeout) = shared
            .finished
            .wait_timeout(guard, POLL_INTERVAL)
            .unwrap_or_else(|p| p.into_inner());
        guard = next;
        if guard.is_none() && timeout.timed_out() && !shared.stop.load(Ordering::Relaxed) {
            // Poll without holding the lock, so the job can finish meanwhile.
            drop(guard);
            let asked = catch_unwind(AssertUnwindSafe(poll)).unwrap_or_else(|panic| {
                poll_panic = Some(panic);
                true
            });
            shared.stop.store(asked, Ordering::Relaxed);
            guard = shared.done.lock().unwrap_or_else(|p| p.into_inner());
        }
    };
    drop(guard);
    if let Some(panic) = poll_panic {
        resume_unwind(panic);
    }
    match result {
        Ok(r) => r,
        Err(panic) => resume_unwind(panic),
    }
}

/// What the launching thread and the job running its launch share.
struct Handoff<R> {
    stop: AtomicBool,
    done: Mutex<Option<std::thread::Result<R>>>,
    finished: Condvar,
}

/// Launch arguments (which hold raw pointers) handed to the thread that runs the
/// launch.
pub(crate) struct SendSlice<'a, T>(pub &'a [T]);

// SAFETY: only used for launch arguments, whose memory the launch's caller lends to
// every thread of the launch (the backends already read it from the whole pool).
unsafe impl<T> Send for SendSlice<'_, T> {}

impl<'a, T> SendSlice<'a, T> {
    /// The slice (a method, so closures capture the whole wrapper, not its field).
    pub(crate) fn get(self) -> &'a [T] {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn busy_until_stopped(stop: StopCheck<'_>, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if stop() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn without_a_poller_the_work_runs_to_the_end() {
        let stopped = run_interruptible(false, |stop| busy_until_stopped(stop, Duration::from_millis(30)));
        assert!(!stopped);
    }

    #[test]
    fn a_poller_stops_work_on_the_pool_and_on_this_thread() {
        for on_this_thread in [false, true] {
            let polls = AtomicUsize::new(0);
            // Asks to stop at the third poll.
            let poll = || polls.fetch_add(1, Ordering::Relaxed) >= 2;
            let start = Instant::now();
            let stopped = with_interrupt_poller(&poll, || {
                run_interruptible(on_this_thread, |stop| {
                    busy_until_stopped(stop, Duration::from_secs(20))
                })
            });
            assert!(stopped, "on_this_thread = {on_this_thread}");
            assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
            assert_eq!(polls.load(Ordering::Relaxed), 3);
        }
        // The poller is gone once its call returns.
        assert!(current_poller().is_none());
    }

    #[test]
    fn a_short_launch_never_polls_and_panics_propagate() {
        let polls = AtomicUsize::new(0);
        let poll = || {
            polls.fetch_add(1, Ordering::Relaxed);
            false
        };
        let r = with_interrupt_poller(&poll, || run_interruptible(false, |_| 7));
        assert_eq!(r, 7);
        assert_eq!(polls.load(Ordering::Relaxed), 0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            with_interrupt_poller(&poll, || {
                let _: i32 = run_interruptible(false, |_| panic!("in the work"));
            })
        }));
        assert!(caught.is_err());
        assert!(current_poller().is_none());
    }
}
