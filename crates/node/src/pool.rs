//! A fixed pool of worker threads for engine calls: reads, queries, the
//! reading of put-batch bodies, snapshots and restores, and any call made
//! while the engine is still opening (which waits for the open). Writes do
//! not wait here for their fsync (the committer's reply settles them), but
//! a snapshot waits for its checkpoint and a call for the open, so the pool
//! is larger than the core count.
//!
//! Idle workers sleep on a condition variable and a call wakes exactly one,
//! which does not preempt the JS thread ([`batch_scheduling`]).
//! Channels that spin and `sched_yield` before they sleep (crossbeam's, and
//! std's mpsc, which is built on it) had 32 idle workers competing with the
//! JS thread for its core: under 32 concurrent gets, `perf` found most of
//! the workers' time in `sched_yield`.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

pub struct Pool {
    queue: Arc<Queue>,
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let queue = Arc::new(Queue { jobs: Mutex::new(VecDeque::new()), ready: Condvar::new() });
        for i in 0..threads {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("braid-call-{i}"))
                .spawn(move || {
                    batch_scheduling();
                    loop {
                        let job = {
                            let mut jobs = queue.jobs.lock().unwrap_or_else(PoisonError::into_inner);
                            loop {
                                match jobs.pop_front() {
                                    Some(job) => break job,
                                    None => jobs = queue.ready.wait(jobs).unwrap_or_else(PoisonError::into_inner),
                                }
                            }
                        };
                        job();
                    }
                })
                .expect("spawn worker thread");
        }
        Pool { queue }
    }

    pub fn spawn(&self, job: Job) {
        self.queue.jobs.lock().unwrap_or_else(PoisonError::into_inner).push_back(job);
        self.queue.ready.notify_one();
    }
}

/// Asks Linux to schedule the calling thread as `SCHED_BATCH`: the same
/// share of the CPU, but its wake-up does not preempt the running thread.
/// When the JS thread hands a call over on a busy core, it goes on parsing
/// the requests already read instead of being switched out for the worker,
/// so calls and their settling come in bursts rather than a pair of context
/// switches each. 32 concurrent gets over HTTP, server on one core
/// (`wrk -c32` against `POST /v1/records/get` on 2,000 records, the two
/// builds alternating, three runs each, 2026-11-25): 14,102-16,289 req/s as normal
/// threads, 15,617-17,403 as batch threads; durable puts, which do not
/// pass through this pool, measured the same within noise.
fn batch_scheduling() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: changes the calling thread's policy (pid 0); a refusal
        // leaves it as it was
        unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
}
