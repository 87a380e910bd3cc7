//! A fixed pool of worker threads for engine calls. Writes block a worker
//! until their group commit is durable, so the pool is larger than the core
//! count: concurrent writers then share fsyncs.
//!
//! The queue is crossbeam's multi-consumer channel: a call wakes one idle
//! worker and nothing else (a `Mutex` around std's receiver woke a second
//! thread per call to take the lock over).

use crossbeam_channel::{unbounded, Sender};

type Job = Box<dyn FnOnce() + Send>;

pub struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let (tx, rx) = unbounded::<Job>();
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("braid-call-{i}"))
                .spawn(move || {
                    // ends when the pool (its sender) is dropped
                    for job in rx.iter() {
                        job();
                    }
                })
                .expect("spawn worker thread");
        }
        Pool { tx }
    }

    pub fn spawn(&self, job: Job) {
        let _ = self.tx.send(job);
    }
}
