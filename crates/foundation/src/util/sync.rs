//! One poison-tolerant lock (and its condition wait). A panic while a lock was held (a bug, already
//! logged by the panic hook) must not take the daemon's other sessions down
//! with it: the data under these locks are maps and caches that stay valid
//! between statements, so the guard is taken back from the poison.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Lock `m`, recovering the guard if a panicking holder poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wait on `cv` while `waiting` holds, at most `timeout`, recovering the
/// guard as [`lock`] does.
pub fn wait_timeout_while<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
    waiting: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    cv.wait_timeout_while(guard, timeout, waiting)
        .map(|(g, _)| g)
        .unwrap_or_else(|p| p.into_inner().0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_back() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
