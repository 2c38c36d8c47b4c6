//! The one lock helper: a poisoned mutex (a thread panicked holding it) is still used, as
//! every value kept behind one here stays consistent between statements.

use std::sync::{Mutex, MutexGuard};

/// `m`'s guard, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
