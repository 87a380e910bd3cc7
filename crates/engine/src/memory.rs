//! Giving freed memory back to the operating system after the engine frees
//! much at once.
//!
//! The allocator is the embedding's choice (the Node binding uses mimalloc),
//! and mimalloc keeps memory freed by one thread but allocated by another in
//! the allocating thread's heap until that thread allocates again. After
//! retention removed 380,000 versions and the indexer rebuilt the vector
//! column without them, the branch's structures held 19 MB, but the process
//! kept 514 MB of freed memory resident: the threads that had allocated it
//! (the rayon workers that linked the graph, the committer) sat idle. So the
//! embedding registers a collect function, and the engine calls it on the
//! threads that free in bulk and on every rayon worker.

use std::sync::OnceLock;

/// `collect(force)`: return what this thread's heap holds freed; with
/// `force`, also what exited threads left and what the allocator keeps
/// committed for reuse.
static COLLECT: OnceLock<fn(bool)> = OnceLock::new();

/// Registers the allocator's collect function (once per process).
pub fn set_collect(collect: fn(bool)) {
    let _ = COLLECT.set(collect);
}

/// Returns the memory freed by a bulk removal to the operating system: on
/// the calling thread (forced), and on every rayon worker as it next looks
/// for work (without waiting for them: a worker may be linking a round of
/// vectors, and the caller may be the committer).
pub fn release_freed() {
    if let Some(&collect) = COLLECT.get() {
        collect(true);
        rayon::spawn_broadcast(move |_| collect(false));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static FORCED: AtomicUsize = AtomicUsize::new(0);

    fn count(force: bool) {
        if force {
            FORCED.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_release_collects_on_the_calling_thread_with_the_registered_function() {
        release_freed(); // nothing registered yet: does nothing
        set_collect(count);
        release_freed();
        assert_eq!(FORCED.load(Ordering::Relaxed), 1);
    }
}
