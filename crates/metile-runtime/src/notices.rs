//! Warnings for the host to show. The runtime has no Python, so what it wants
//! said (a refused cache folder, arrays copied at every launch) waits here until
//! the host takes it: metile-py shows each one as a `metile.MetileWarning`
//! after the call that caused it. Nothing is printed on stderr.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static QUEUE: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Whether `QUEUE` may hold something: lets the launch path skip the lock.
static PENDING: AtomicBool = AtomicBool::new(false);

/// Queues `message` for the host.
pub fn warn(message: String) {
    QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(message);
    PENDING.store(true, Ordering::Release);
}

/// Whether a warning may be waiting (cheap enough for every launch).
pub fn pending() -> bool {
    PENDING.load(Ordering::Acquire)
}

/// The warnings not yet shown, oldest first.
pub fn take() -> Vec<String> {
    let mut queue = QUEUE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    PENDING.store(false, Ordering::Release);
    std::mem::take(&mut *queue)
}
