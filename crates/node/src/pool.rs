//! A fixed pool of worker threads for engine calls: reads, queries, the
//! reading of put-batch bodies, snapshots and restores, and any call made
//! while the engine is still opening (which waits for the open). Writes do
//! not wait here for their fsync (the committer's reply settles them), but
//! a snapshot waits for its checkpoint and a call for the open, so the pool
//! is larger than the core count.
//!
//! Idle workers sleep on a condition variable and a call wakes exactly one.
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
                .spawn(move || loop {
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
