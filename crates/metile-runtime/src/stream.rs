//! The stream a launch runs on, chosen by the caller for the duration of a
//! scope on the calling thread.
//!
//! A framework that queues GPU work on streams of its own (torch's current
//! stream, CuPy's) expects a kernel that takes its tensors to run on the
//! stream current there, so that it is ordered after the work that produced
//! its inputs and before the work that reads its outputs with no
//! synchronisation. The caller (the Python module, which knows the framework)
//! enters a [`LaunchStream`] scope around a launch; everything the launch
//! enqueues on a device with streams — the kernel, split-K's second kernel,
//! operand copies, staging uploads and downloads, timing events — goes on that
//! stream. Outside any scope, and on backends without streams, nothing
//! changes: a cuda launch goes on the legacy default stream.
//!
//! The scope is per thread because a launch is enqueued by the thread that
//! calls it, and nested scopes restore the outer stream when they end (a timed
//! region, [`crate::Device::time_ms`], may hold a scope whose launches enter
//! their own).

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static CURRENT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The stream the calling thread's launches go on: a backend's raw stream
/// handle (a `CUstream` on cuda, where 0 is the legacy default stream), or
/// `None` outside any [`LaunchStream`] scope.
pub fn launch_stream() -> Option<u64> {
    CURRENT.with(Cell::get)
}

/// A scope during which the calling thread's launches go on one stream; the
/// stream current before comes back when it is dropped.
#[must_use = "the stream applies only while the scope is alive"]
pub struct LaunchStream {
    previous: Option<u64>,
    /// The scope belongs to the thread that entered it.
    _thread_bound: PhantomData<*const ()>,
}

impl LaunchStream {
    /// Enters a scope on `stream`; `None` keeps the stream already current
    /// (a launch with no framework tensors inside a timed region stays on the
    /// region's stream).
    pub fn enter(stream: Option<u64>) -> LaunchStream {
        let previous = launch_stream();
        if stream.is_some() {
            CURRENT.with(|c| c.set(stream));
        }
        LaunchStream {
            previous,
            _thread_bound: PhantomData,
        }
    }
}

impl Drop for LaunchStream {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore_the_outer_stream() {
        assert_eq!(launch_stream(), None);
        {
            let _outer = LaunchStream::enter(Some(7));
            assert_eq!(launch_stream(), Some(7));
            {
                let _kept = LaunchStream::enter(None);
                assert_eq!(launch_stream(), Some(7));
                let _inner = LaunchStream::enter(Some(9));
                assert_eq!(launch_stream(), Some(9));
            }
            assert_eq!(launch_stream(), Some(7));
        }
        assert_eq!(launch_stream(), None);
    }

    #[test]
    fn the_stream_is_per_thread() {
        let _scope = LaunchStream::enter(Some(3));
        let other = std::thread::spawn(launch_stream).join().ok().flatten();
        assert_eq!(other, None);
        assert_eq!(launch_stream(), Some(3));
    }
}
