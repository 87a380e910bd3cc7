//! A pool of worker threads for engine calls: reads, queries, the reading
//! of put-batch bodies, snapshots and restores, and any call made while the
//! engine is still opening (which waits for the open). Writes do not wait
//! here for their fsync (the committer's reply settles them), but a snapshot
//! waits for its checkpoint and a call for the open, so the pool may grow
//! past the core count (up to its `max`).
//!
//! Workers are started when calls need them and stop after [`IDLE`] without
//! one, or as soon as the queue is empty once the pool is closed (the
//! engine's `close`), so an engine that was closed, or a process that opens
//! and closes many engines, keeps no threads (each engine had started 32
//! that ran until the process ended: 60 open/close cycles left 1,931
//! threads, and once the process could start no more, `open` aborted it).
//! A worker that cannot be started leaves the call to the workers running,
//! or, when there are none, runs it on the caller's thread.
//!
//! Idle workers sleep on a condition variable. A call wakes one unless a
//! woken worker is already on its way to the queue ([`Jobs::wake_one`]),
//! and a woken worker does not preempt the JS thread ([`batch_scheduling`]).
//! Channels that spin and `sched_yield` before they sleep (crossbeam's, and
//! std's mpsc, which is built on it) had 32 idle workers competing with the
//! JS thread for its core: under 32 concurrent gets, `perf` found most of
//! the workers' time in `sched_yield`.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How long a worker waits for a call before it stops.
const IDLE: Duration = Duration::from_secs(10);

struct Jobs {
    queue: VecDeque<Job>,
    /// Workers asleep on `ready`.
    idle: usize,
    /// Workers woken (or started) for the queue that have not yet taken a
    /// job from it.
    waking: usize,
    /// Workers running.
    workers: usize,
    /// Most workers at once.
    max: usize,
    /// The pool's engine was closed: workers stop once the queue is empty.
    closed: bool,
}

impl Jobs {
    /// Wakes one sleeping worker for the queued jobs, or starts one when
    /// none sleeps, unless one is already on its way: a burst of calls
    /// wakes one worker, which takes the next job as it finishes one, and
    /// wakes another only once it runs, so the workers that run at once grow
    /// with the cores free to run them, not with the calls queued. On a busy
    /// core every wake is a context switch in and out (32 concurrent gets
    /// over HTTP on one core spent 15% of it in `finish_task_switch` when
    /// each call woke a worker of its own). Returns a job to run on the
    /// caller's thread when no worker runs and none could be started.
    #[must_use]
    fn wake_one(&mut self, queue: &Arc<Queue>) -> Option<Job> {
        if self.queue.is_empty() || self.waking > 0 {
            return None;
        }
        if self.idle > 0 {
            self.waking += 1;
            queue.ready.notify_one();
            return None;
        }
        if self.workers >= self.max {
            return None;
        }
        self.workers += 1;
        self.waking += 1;
        let worker = queue.clone();
        let started = std::thread::Builder::new().name("braid-call".into()).spawn(move || {
            batch_scheduling();
            worker.lock().waking -= 1;
            while let Some(job) = worker.take() {
                job();
            }
        });
        if started.is_err() {
            self.workers -= 1;
            self.waking -= 1;
            if self.workers == 0 {
                return self.queue.pop_front();
            }
        }
        None
    }
}

struct Queue {
    jobs: Mutex<Jobs>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next job, after sleeping until there is one; `None` when the
    /// worker should stop (idle too long, or the pool closed and the queue
    /// empty), which it has then been counted out of the pool for.
    fn take(self: &Arc<Self>) -> Option<Job> {
        let mut jobs = self.lock();
        loop {
            if let Some(job) = jobs.queue.pop_front() {
                // more left: another worker, in case this job is long
                let inline = jobs.wake_one(self);
                drop(jobs);
                if let Some(inline) = inline {
                    inline();
                }
                return Some(job);
            }
            if jobs.closed {
                jobs.workers -= 1;
                return None;
            }
            jobs.idle += 1;
            let (woken, waited) = self.ready.wait_timeout(jobs, IDLE).unwrap_or_else(PoisonError::into_inner);
            jobs = woken;
            jobs.idle -= 1;
            if waited.timed_out() && jobs.queue.is_empty() {
                jobs.workers -= 1;
                drop(jobs);
                // what this worker allocated (bodies it read) was freed by
                // the committer; hand it back before the thread ends
                crate::collect(true);
                return None;
            }
            // a spurious wake-up may count as the woken one: at worst one
            // more worker is woken later, never one fewer
            jobs.waking = jobs.waking.saturating_sub(1);
        }
    }
}

pub struct Pool {
    queue: Arc<Queue>,
}

impl Pool {
    /// A pool of at most `max` workers (none started yet).
    pub fn new(max: usize) -> Pool {
        let jobs = Jobs { queue: VecDeque::new(), idle: 0, waking: 0, workers: 0, max: max.max(1), closed: false };
        Pool { queue: Arc::new(Queue { jobs: Mutex::new(jobs), ready: Condvar::new() }) }
    }

    pub fn spawn(&self, job: Job) {
        let mut jobs = self.queue.lock();
        jobs.queue.push_back(job);
        let inline = jobs.wake_one(&self.queue);
        drop(jobs);
        if let Some(inline) = inline {
            inline();
        }
    }

    /// Lets idle workers stop at once, and every worker once the queue is
    /// empty; calls made after this still run (on workers started for them).
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }

    /// Workers running.
    #[cfg(test)]
    pub fn workers(&self) -> usize {
        self.queue.lock().workers
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Barrier};
    use std::time::Duration;

    use super::*;

    /// Generous: these fail by waiting forever, not by being slow.
    const STUCK: Duration = Duration::from_secs(30);

    /// A pool of `threads` workers, all started and asleep (as a running
    /// server's are between calls), so no job is taken by a worker that is
    /// just starting.
    fn asleep(threads: usize) -> Pool {
        let pool = Pool::new(threads);
        let all = Arc::new(Barrier::new(threads));
        for _ in 0..threads {
            let all = all.clone();
            pool.spawn(Box::new(move || {
                all.wait();
            }));
        }
        while pool.queue.lock().idle < threads {
            std::thread::sleep(Duration::from_millis(1));
        }
        pool
    }

    /// Workers stop once the pool is closed (and after being idle), and a
    /// call made after that still runs.
    #[test]
    fn a_closed_pool_keeps_no_threads_and_still_runs_calls() {
        let pool = asleep(8);
        assert_eq!(pool.workers(), 8);
        pool.close();
        let stopped = std::time::Instant::now();
        while pool.workers() > 0 {
            assert!(stopped.elapsed() < STUCK, "workers still running after close");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (done, finished) = mpsc::channel();
        pool.spawn(Box::new(move || done.send(()).unwrap()));
        finished.recv_timeout(STUCK).expect("a call after close never ran");
        while pool.workers() > 0 {
            assert!(stopped.elapsed() < STUCK, "the worker started after close kept running");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn every_job_of_a_burst_runs() {
        let pool = asleep(4);
        let ran = Arc::new(AtomicUsize::new(0));
        let (done, finished) = mpsc::channel();
        for _ in 0..10_000 {
            let (ran, done) = (ran.clone(), done.clone());
            pool.spawn(Box::new(move || {
                ran.fetch_add(1, Ordering::Relaxed);
                done.send(()).unwrap();
            }));
        }
        for _ in 0..10_000 {
            finished.recv_timeout(STUCK).expect("a queued job never ran");
        }
        assert_eq!(ran.load(Ordering::Relaxed), 10_000);
    }

    /// Jobs that can only finish together (each waits for all the others)
    /// need as many workers running at once: a burst must bring them up.
    #[test]
    fn a_burst_runs_on_as_many_workers_as_it_needs() {
        let pool = asleep(8);
        let all = Arc::new(Barrier::new(8));
        let (done, finished) = mpsc::channel();
        for _ in 0..8 {
            let (all, done) = (all.clone(), done.clone());
            pool.spawn(Box::new(move || {
                all.wait();
                done.send(()).unwrap();
            }));
        }
        for _ in 0..8 {
            finished.recv_timeout(STUCK).expect("a job waited for a worker that was never woken");
        }
    }

    /// A call that blocks (a snapshot waiting for its checkpoint) does not
    /// hold back one made after it.
    #[test]
    fn a_blocked_job_does_not_hold_back_the_next() {
        let pool = asleep(2);
        let (release, released) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel();
        let first = done.clone();
        pool.spawn(Box::new(move || {
            released.recv().unwrap();
            first.send("blocked").unwrap();
        }));
        pool.spawn(Box::new(move || done.send("next").unwrap()));
        assert_eq!(finished.recv_timeout(STUCK), Ok("next"));
        release.send(()).unwrap();
        assert_eq!(finished.recv_timeout(STUCK), Ok("blocked"));
    }
}
