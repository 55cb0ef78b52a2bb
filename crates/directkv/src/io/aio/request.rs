//! A request as the backends see it, and its state: built over borrowed
//! buffers, moved forward by completions (short transfers and transient
//! errors continue where they stopped), done when `result` is set.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::*;
use crate::constants::SHORT_IO_RETRIES_MAX;

/// A request as the backends see it: raw buffers, progress and outcome.
pub(crate) struct Request {
    pub(super) write: bool,
    pub(super) iovs: Vec<libc::iovec>,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) rw_flags: i32,
    /// Bytes moved so far.
    pub(crate) done: usize,
    /// The iovecs still to move; rebuilt only while the request is not in
    /// flight, so the kernel's view of it never changes under it.
    pub(super) cur: Vec<libc::iovec>,
    pub(super) retries: u32,
    /// `None` until the request completes.
    pub(crate) result: Option<std::io::Result<()>>,
}

impl Request {
    /// A request over `op`'s buffers. The pointers are valid while `op`'s
    /// borrow is; the caller keeps `op` alive until the batch returns.
    pub(crate) fn new(op: &mut BatchOp<'_>, rw_flags: i32) -> Request {
        let (write, iovs, offset) = match op {
            BatchOp::Read { bufs, offset } => (
                false,
                bufs.iter_mut()
                    .map(|b| {
                        let bytes = b.bytes_mut();
                        libc::iovec {
                            iov_base: bytes.as_mut_ptr().cast(),
                            iov_len: bytes.len(),
                        }
                    })
                    .collect::<Vec<_>>(),
                *offset,
            ),
            BatchOp::Write { bufs, offset } => (
                true,
                bufs.iter()
                    .map(|b| libc::iovec {
                        iov_base: b.bytes().as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    })
                    .collect(),
                *offset,
            ),
        };
        let len = iovs.iter().map(|v| v.iov_len).sum();
        Request {
            write,
            iovs,
            offset,
            len,
            rw_flags: if write { rw_flags } else { 0 },
            done: 0,
            cur: Vec::new(),
            retries: 0,
            result: None,
        }
    }

    /// Rebuilds `cur` to cover what is left after `done` bytes.
    pub(super) fn prepare(&mut self) {
        self.cur.clear();
        let mut skip = self.done;
        for v in &self.iovs {
            if skip >= v.iov_len {
                skip -= v.iov_len;
                continue;
            }
            self.cur.push(libc::iovec {
                // SAFETY: `skip < iov_len`, so the result stays inside the
                // buffer `v` describes.
                iov_base: unsafe { v.iov_base.cast::<u8>().add(skip) }.cast(),
                iov_len: v.iov_len - skip,
            });
            skip = 0;
        }
    }

    pub(super) fn at(&self) -> u64 {
        self.offset + self.done as u64
    }

    /// Takes one completion; true when the request must go again.
    pub(super) fn complete(
        &mut self,
        res: std::io::Result<usize>,
        counters: Option<&Counters>,
    ) -> bool {
        match res {
            Ok(0) => {
                let kind = if self.write {
                    std::io::ErrorKind::WriteZero
                } else {
                    std::io::ErrorKind::UnexpectedEof
                };
                self.result = Some(Err(std::io::Error::new(kind, "transfer of 0 bytes")));
                false
            }
            Ok(n) => {
                self.done += n;
                self.retries = 0;
                if self.done >= self.len {
                    self.result = Some(Ok(()));
                    false
                } else {
                    if let Some(c) = counters {
                        c.continued.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) =>
            {
                self.retries += 1;
                if self.retries > SHORT_IO_RETRIES_MAX {
                    self.result = Some(Err(e));
                    false
                } else {
                    if let Some(c) = counters {
                        c.continued.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
            }
            Err(e) => {
                self.result = Some(Err(e));
                false
            }
        }
    }

    /// Runs the request to completion with blocking calls on this thread.
    pub(crate) fn run_blocking(&mut self, fd: RawFd, counters: Option<&Counters>) {
        loop {
            self.prepare();
            let n = self.cur.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
            // SAFETY: `cur` describes live buffers the caller lent for this
            // batch (readable for writes, writable and unaliased for reads);
            // the call does not keep them.
            let r = unsafe {
                if self.write {
                    libc::pwritev2(fd, self.cur.as_ptr(), n, self.at() as i64, self.rw_flags)
                } else {
                    libc::preadv2(fd, self.cur.as_ptr(), n, self.at() as i64, 0)
                }
            };
            let res = if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(r as usize)
            };
            if !self.complete(res, counters) {
                return;
            }
        }
    }
}

/// The outcomes of a batch's requests, in request order, each set once in
/// whatever order they are known (a request refused before it ran, then
/// the ones that ran).
pub(crate) struct Outcomes(Vec<Option<Result<()>>>);

impl Outcomes {
    /// Room for the outcomes of `requests` requests, none known yet.
    pub(crate) fn new(requests: usize) -> Self {
        Outcomes((0..requests).map(|_| None).collect())
    }

    /// Sets the outcome of request `i`.
    pub(crate) fn set(&mut self, i: usize, outcome: Result<()>) {
        assert!(self.0[i].is_none(), "a request has one outcome");
        self.0[i] = Some(outcome);
    }

    /// Every request's outcome, in order.
    pub(crate) fn all(self) -> Vec<Result<()>> {
        let requests = self.0.len();
        let all: Vec<Result<()>> = self.0.into_iter().flatten().collect();
        assert_eq!(all.len(), requests, "every request has an outcome");
        all
    }
}
