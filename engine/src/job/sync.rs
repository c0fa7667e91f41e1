//! Locking that survives a panicked holder, for the job's shared state.

/// Locks a mutex, whether or not a thread panicked holding it.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
