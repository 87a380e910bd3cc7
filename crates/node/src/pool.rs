//! A fixed pool of worker threads for engine calls. Writes block a worker
//! until their group commit is durable, so the pool is larger than the core
//! count: concurrent writers then share fsyncs.

use std::sync::{mpsc, Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

pub struct Pool {
    tx: mpsc::Sender<Job>,
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("braid-call-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(guard) => guard.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
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
