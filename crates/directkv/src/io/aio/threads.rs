//! The thread-pool backend: workers making blocking positional calls, for
//! kernels or sandboxes without io_uring.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use super::*;
use crate::error::{Error, Result};

/// A request handed to a worker.
pub(super) struct Job {
    pub(super) req: *mut Request,
    pub(super) fd: RawFd,
    pub(super) batch: Arc<BatchLatch>,
}

// SAFETY: a job's request is touched by exactly one worker until the worker
// counts it down on the batch latch; the submitting thread waits for the latch
// to reach zero before it touches the requests again or returns, so the
// request (and the buffers it points to) outlive the worker's use.
unsafe impl Send for Job {}

pub(super) struct BatchLatch {
    pub(super) left: Mutex<usize>,
    pub(super) done: Condvar,
}

pub(super) struct Queue {
    pub(super) jobs: VecDeque<Job>,
    pub(super) stop: bool,
}

pub(super) struct Shared {
    pub(super) queue: Mutex<Queue>,
    pub(super) ready: Condvar,
    pub(super) counters: Counters,
}

pub(super) struct Threads {
    pub(super) shared: Arc<Shared>,
    pub(super) workers: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    pub(super) fn new(n: usize) -> Result<Threads> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                stop: false,
            }),
            ready: Condvar::new(),
            counters: Counters::default(),
        });
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("directkv-aio-{i}"))
                .stack_size(128 << 10)
                .spawn(move || worker(&shared))
                .map_err(|e| Error::InvalidArgument(format!("cannot start I/O threads: {e}")))?;
            workers.push(handle);
        }
        Ok(Threads { shared, workers })
    }

    pub(super) fn run(&self, fd: RawFd, reqs: &mut [Request], c: &Counters) -> usize {
        if let [one] = reqs {
            // One request: no hand-off.
            one.run_blocking(fd, Some(c));
            return 1;
        }
        let batch = Arc::new(BatchLatch {
            left: Mutex::new(reqs.len()),
            done: Condvar::new(),
        });
        {
            let mut q = lock(&self.shared.queue);
            for r in reqs.iter_mut() {
                q.jobs.push_back(Job {
                    req: r,
                    fd,
                    batch: Arc::clone(&batch),
                });
            }
        }
        self.shared.ready.notify_all();
        let mut left = lock(&batch.left);
        while *left > 0 {
            left = batch.done.wait(left).unwrap_or_else(|p| p.into_inner());
        }
        drop(left);
        let c2 = &self.shared.counters;
        c.continued
            .fetch_add(c2.continued.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        reqs.len().min(self.workers.len())
    }
}

pub(super) fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut q = lock(&shared.queue);
            loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                if q.stop {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // SAFETY: see `Job`: this worker is the request's only user until it
        // counts the latch down below.
        let req = unsafe { &mut *job.req };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            req.run_blocking(job.fd, Some(&shared.counters));
        }));
        if ran.is_err() && req.result.is_none() {
            req.result = Some(Err(std::io::Error::other("I/O worker panicked")));
        }
        let mut left = lock(&job.batch.left);
        *left -= 1;
        if *left == 0 {
            job.batch.done.notify_all();
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        lock(&self.shared.queue).stop = true;
        self.shared.ready.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
