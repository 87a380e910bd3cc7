//! Settling the promises of engine calls from the worker pool, cheaply.
//!
//! napi-rs's `JsDeferred` creates a threadsafe function (a libuv async
//! handle, an environment cleanup hook) for every promise and closes it
//! after; profiled under load, that was most of the binding's cost on the JS
//! thread. Here an engine has one threadsafe function for all its calls:
//! a worker queues the finished call and wakes the JS thread once, and the
//! JS thread settles every queued promise in one callback.
//!
//! The threadsafe function is unreferenced while no call is pending, so an
//! idle engine does not keep the process alive, and referenced while one is.
//! It is never released: it lives as long as the JS environment, whose
//! teardown finalizes it; after that, finished calls are dropped unsettled
//! (there is no JS thread left to settle them on).

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use napi::sys;

/// Turns a finished call into the value to resolve with (`Ok`) or the error
/// to reject with (`Err`), on the JS thread.
pub type Outcome = Box<dyn FnOnce(sys::napi_env) -> Result<sys::napi_value, sys::napi_value> + Send>;

/// Work a call hands to the JS thread before it settles (freeing a buffer
/// it has finished reading).
pub type Chore = Box<dyn FnOnce(sys::napi_env) + Send>;

/// What the JS thread does for a call, in the order queued.
enum Job {
    Settle(Deferred, Outcome),
    Run(Chore),
}

struct Queue {
    done: Vec<Job>,
    /// Set when the environment finalized the threadsafe function.
    closed: bool,
}

/// A `napi_deferred`: an opaque handle, used only on the JS thread.
struct Deferred(sys::napi_deferred);
// SAFETY: the handle is only carried through a worker, never used there.
unsafe impl Send for Deferred {}

struct Shared {
    queue: Mutex<Queue>,
    /// Promises made and not yet settled (changed on the JS thread only).
    pending: AtomicUsize,
    /// Set once, right after the threadsafe function is made.
    tsfn: AtomicPtr<sys::napi_threadsafe_function__>,
    /// Whether the threadsafe function is alive: read-locked by a worker
    /// while it calls the function, cleared (write-locked) when the
    /// environment finalizes it.
    alive: RwLock<bool>,
}

#[derive(Clone)]
pub struct Settler {
    shared: Arc<Shared>,
}

/// A promise made on the JS thread, to be settled from a worker.
pub struct Pending {
    deferred: Deferred,
    shared: Arc<Shared>,
}

impl Settler {
    /// # Safety
    /// On the JS thread of `env`.
    pub unsafe fn new(env: sys::napi_env) -> napi::Result<Settler> {
        let mut name = ptr::null_mut();
        check(unsafe { sys::napi_create_string_utf8(env, c"braid-settle".as_ptr(), 12, &mut name) })?;
        // the context points at `Shared`, whose address is fixed once in its Arc
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { done: Vec::new(), closed: false }),
            pending: AtomicUsize::new(0),
            tsfn: AtomicPtr::new(ptr::null_mut()),
            alive: RwLock::new(true),
        });
        let context = Arc::into_raw(shared.clone()) as *mut c_void;
        let mut tsfn = ptr::null_mut();
        let status = unsafe {
            sys::napi_create_threadsafe_function(
                env,
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                context,
                Some(finalize),
                context,
                Some(settle_queued),
                &mut tsfn,
            )
        };
        if let Err(e) = check(status) {
            // SAFETY: the context was not handed over
            drop(unsafe { Arc::from_raw(context as *const Shared) });
            return Err(e);
        }
        check(unsafe { sys::napi_unref_threadsafe_function(env, tsfn) })?;
        shared.tsfn.store(tsfn, Ordering::Release);
        Ok(Settler { shared })
    }

    /// A new promise and the handle that settles it.
    ///
    /// # Safety
    /// On the JS thread of `env`.
    pub unsafe fn promise(&self, env: sys::napi_env) -> napi::Result<(sys::napi_value, Pending)> {
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        check(unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) })?;
        if self.shared.pending.fetch_add(1, Ordering::Relaxed) == 0 {
            // a call is in flight: keep the process alive until it settles
            check(unsafe { sys::napi_ref_threadsafe_function(env, self.shared.tsfn.load(Ordering::Acquire)) })?;
        }
        Ok((promise, Pending { deferred: Deferred(deferred), shared: self.shared.clone() }))
    }
}

impl Settler {
    /// Promises made and not yet settled.
    pub fn unsettled(&self) -> usize {
        self.shared.pending.load(Ordering::Relaxed)
    }
}

impl Pending {
    /// Settles now (on the JS thread of `env`).
    ///
    /// # Safety
    /// On the JS thread of `env`.
    pub unsafe fn settle_now(self, env: sys::napi_env, outcome: Outcome) {
        unsafe { settle(env, &self.shared, self.deferred, outcome) };
    }

    /// Settles on the JS thread (from any thread).
    pub fn settle(self, outcome: Outcome) {
        self.shared.queue_job(Job::Settle(self.deferred, outcome));
    }

    /// Runs `chore` on the JS thread (from any thread), before this call
    /// settles. Dropped unrun when the environment has gone.
    pub fn run_on_js_thread(&self, chore: Chore) {
        self.shared.queue_job(Job::Run(chore));
    }
}

impl Shared {
    fn queue_job(&self, job: Job) {
        let wake = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.closed {
                return;
            }
            queue.done.push(job);
            queue.done.len() == 1
        };
        // Outside the queue's lock: the JS thread this wakes preempts the
        // worker (pool.rs, `batch_scheduling`) and takes that lock at
        // once to settle; woken under it, it blocked until the worker ran
        // again to let go, and was woken a second time. A wake is not lost:
        // whoever found the queue empty wakes the JS thread, which settles
        // all there is when it runs.
        if wake {
            // the read lock keeps the environment from finalizing the function meanwhile
            let alive = self.alive.read().unwrap_or_else(PoisonError::into_inner);
            if *alive {
                // SAFETY: alive, and kept so until the lock is let go
                unsafe {
                    sys::napi_call_threadsafe_function(
                        self.tsfn.load(Ordering::Acquire),
                        ptr::null_mut(),
                        sys::ThreadsafeFunctionCallMode::nonblocking,
                    )
                };
            }
        }
    }
}

unsafe fn settle(env: sys::napi_env, shared: &Shared, deferred: Deferred, outcome: Outcome) {
    match outcome(env) {
        Ok(value) => unsafe { sys::napi_resolve_deferred(env, deferred.0, value) },
        Err(error) => unsafe { sys::napi_reject_deferred(env, deferred.0, error) },
    };
    if shared.pending.fetch_sub(1, Ordering::Relaxed) == 1 {
        unsafe { sys::napi_unref_threadsafe_function(env, shared.tsfn.load(Ordering::Acquire)) };
    }
}

unsafe extern "C" fn settle_queued(env: sys::napi_env, _js: sys::napi_value, context: *mut c_void, _data: *mut c_void) {
    if env.is_null() {
        return;
    }
    // SAFETY: the context is the `Shared` of `Settler::new`, alive until `finalize`
    let shared = unsafe { &*(context as *const Shared) };
    let done = std::mem::take(&mut shared.queue.lock().unwrap_or_else(|e| e.into_inner()).done);
    for job in done {
        // each job in its own handle scope, so a burst does not pile up handles
        let mut scope = ptr::null_mut();
        unsafe { sys::napi_open_handle_scope(env, &mut scope) };
        match job {
            Job::Settle(deferred, outcome) => unsafe { settle(env, shared, deferred, outcome) },
            Job::Run(chore) => chore(env),
        }
        unsafe { sys::napi_close_handle_scope(env, scope) };
    }
}

unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the reference `Settler::new` handed to the threadsafe function
    let shared = unsafe { Arc::from_raw(data as *const Shared) };
    *shared.alive.write().unwrap_or_else(PoisonError::into_inner) = false;
    let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
    queue.closed = true;
    queue.done.clear();
}

fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            napi::Status::from(status),
            "a napi call failed while settling an engine call".to_string(),
        ))
    }
}
