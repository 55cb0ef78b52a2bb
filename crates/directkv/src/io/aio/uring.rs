//! The io_uring backend: a few rings, one batch at a time each, with the
//! arena registered as fixed buffers and open files as fixed files.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use io_uring::{opcode, types, IoUring};

use super::*;
use crate::io::buf::AlignedArena;

pub(super) struct Ring {
    pub(super) ring: IoUring,
}

/// Registered memory: address ranges by fixed-buffer index, and the arena
/// that owns them (kept alive here).
pub(super) struct Fixed {
    pub(super) regions: Vec<(usize, usize)>,
    pub(super) _arena: AlignedArena,
}

impl Fixed {
    /// The fixed-buffer index holding `[ptr, ptr + len)` whole.
    pub(super) fn index_of(&self, ptr: usize, len: usize) -> Option<u16> {
        self.regions
            .iter()
            .position(|&(base, size)| ptr >= base && ptr + len <= base + size)
            .map(|i| i as u16)
    }
}

pub(super) struct Uring {
    // Declared first: dropped (unregistering everything) before `fixed`
    // releases the memory.
    pub(super) rings: Box<[Mutex<Ring>]>,
    pub(super) depth: usize,
    pub(super) fixed: OnceLock<Fixed>,
    /// Fixed-file slots: the descriptor in each, if any.
    pub(super) files: Mutex<Vec<Option<RawFd>>>,
    pub(super) fixed_files: bool,
    pub(super) next: AtomicU64,
}

impl Uring {
    pub(super) fn new(depth: u32) -> std::io::Result<Uring> {
        assert!(depth > 0, "a ring has room for a request");
        let mut rings = Vec::with_capacity(RINGS);
        for _ in 0..RINGS {
            rings.push(IoUring::new(depth)?);
        }
        // Sparse file tables (Linux 5.19+); without them, plain descriptors.
        let fixed_files = rings
            .iter()
            .all(|r| r.submitter().register_files_sparse(FILE_SLOTS).is_ok());
        Ok(Uring {
            rings: rings
                .into_iter()
                .map(|ring| Mutex::new(Ring { ring }))
                .collect(),
            depth: depth as usize,
            fixed: OnceLock::new(),
            files: Mutex::new(vec![None; FILE_SLOTS as usize]),
            fixed_files,
            next: AtomicU64::new(0),
        })
    }

    pub(super) fn register_arena(&self, arena: &AlignedArena) -> std::io::Result<bool> {
        if self.fixed.get().is_some() {
            return Ok(false);
        }
        let (base, size) = arena.region();
        // Pieces of at most 1 GiB, each a whole number of slots, so no slot
        // straddles two.
        let piece = (FIXED_BUFFER_MAX / arena.slot_bytes()).max(1) * arena.slot_bytes();
        let mut regions = Vec::new();
        let mut at = 0;
        while at < size {
            let len = piece.min(size - at);
            regions.push((base as usize + at, len));
            at += len;
        }
        assert_eq!(
            piece % arena.slot_bytes(),
            0,
            "no slot straddles two pieces"
        );
        assert_eq!(
            regions.iter().map(|&(_, len)| len).sum::<usize>(),
            size,
            "the pieces cover the arena"
        );
        if regions.len() > usize::from(u16::MAX) {
            return Ok(false);
        }
        let iovecs: Vec<libc::iovec> = regions
            .iter()
            .map(|&(b, l)| libc::iovec {
                iov_base: b as *mut libc::c_void,
                iov_len: l,
            })
            .collect();
        for (registered, r) in self.rings.iter().enumerate() {
            let ring = lock(r);
            // SAFETY: the iovecs describe the arena's allocation, which stays
            // valid until the rings are dropped: `self.fixed` below keeps a
            // handle on the arena and is dropped after `self.rings`.
            let res = unsafe { ring.ring.submitter().register_buffers(&iovecs) };
            if let Err(e) = res {
                for r in self.rings.iter().take(registered) {
                    let _ = lock(r).ring.submitter().unregister_buffers();
                }
                return Err(e);
            }
        }
        let _ = self.fixed.set(Fixed {
            regions,
            _arena: arena.clone(),
        });
        Ok(true)
    }

    pub(super) fn register_file(&self, fd: RawFd) -> Option<u32> {
        if !self.fixed_files {
            return None;
        }
        let mut files = lock(&self.files);
        let slot = files.iter().position(Option::is_none)? as u32;
        assert!(slot < FILE_SLOTS, "the table has FILE_SLOTS slots");
        for (i, r) in self.rings.iter().enumerate() {
            if lock(r)
                .ring
                .submitter()
                .register_files_update(slot, &[fd])
                .is_err()
            {
                for r in self.rings.iter().take(i) {
                    let _ = lock(r).ring.submitter().register_files_update(slot, &[-1]);
                }
                return None;
            }
        }
        files[slot as usize] = Some(fd);
        Some(slot)
    }

    pub(super) fn unregister_file(&self, slot: u32) {
        let mut files = lock(&self.files);
        for r in self.rings.iter() {
            let _ = lock(r).ring.submitter().register_files_update(slot, &[-1]);
        }
        if let Some(s) = files.get_mut(slot as usize) {
            *s = None;
        }
    }

    /// A ring for this batch: a free one if there is one, else the next in
    /// turn.
    pub(super) fn pick(&self) -> MutexGuard<'_, Ring> {
        for r in self.rings.iter() {
            if let Ok(g) = r.try_lock() {
                return g;
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % self.rings.len();
        lock(&self.rings[i])
    }

    pub(super) fn entry(
        &self,
        r: &Request,
        target: Target,
        i: usize,
        c: &Counters,
    ) -> io_uring::squeue::Entry {
        let fixed_buf = match (self.fixed.get(), r.cur.as_slice()) {
            (Some(f), [one]) => f
                .index_of(one.iov_base as usize, one.iov_len)
                .map(|idx| (one.iov_base.cast::<u8>(), one.iov_len as u32, idx)),
            _ => None,
        };
        if fixed_buf.is_some() {
            c.fixed_buffer.fetch_add(1, Ordering::Relaxed);
        }
        if target.slot.is_some() {
            c.fixed_file.fetch_add(1, Ordering::Relaxed);
        }
        let iovs = r.cur.len().min(libc::UIO_MAXIOV as usize) as u32;
        macro_rules! build {
            ($t:expr) => {
                match (r.write, fixed_buf) {
                    (true, Some((p, len, idx))) => opcode::WriteFixed::new($t, p, len, idx)
                        .offset(r.at())
                        .rw_flags(r.rw_flags)
                        .build(),
                    (false, Some((p, len, idx))) => opcode::ReadFixed::new($t, p, len, idx)
                        .offset(r.at())
                        .build(),
                    (true, None) => opcode::Writev::new($t, r.cur.as_ptr(), iovs)
                        .offset(r.at())
                        .rw_flags(r.rw_flags)
                        .build(),
                    (false, None) => opcode::Readv::new($t, r.cur.as_ptr(), iovs)
                        .offset(r.at())
                        .build(),
                }
            };
        }
        let e = match target.slot {
            Some(slot) => build!(types::Fixed(slot)),
            None => build!(types::Fd(target.fd)),
        };
        e.user_data(i as u64)
    }

    /// Returns the most requests it had in flight at once.
    pub(super) fn run(&self, target: Target, reqs: &mut [Request], c: &Counters) -> usize {
        let mut guard = self.pick();
        let ring = &mut guard.ring;
        let mut todo: VecDeque<usize> = (0..reqs.len()).collect();
        // Requests the kernel owns: if anything unwinds out of this loop
        // while some are, the process aborts (the buffers they name would
        // be freed under the kernel).
        let mut kernel = KernelOwned(0);
        let mut most = 0usize;
        while !todo.is_empty() || kernel.0 > 0 {
            {
                let mut sq = ring.submission();
                while kernel.0 < self.depth {
                    let Some(&i) = todo.front() else { break };
                    reqs[i].prepare();
                    let e = self.entry(&reqs[i], target, i, c);
                    // SAFETY: the entry points at `reqs[i].cur` and the
                    // buffers it describes. `cur` is not touched again until
                    // this request's completion is reaped, and this function
                    // neither returns before every request it pushed has
                    // completed nor unwinds while one has not (`kernel`
                    // aborts then), so both outlive the kernel's use of them.
                    if unsafe { sq.push(&e) }.is_err() {
                        break;
                    }
                    todo.pop_front();
                    kernel.0 += 1;
                }
            }
            most = most.max(kernel.0);
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => kernel.abort(&format!("submission failed ({e})")),
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                assert!(i < reqs.len(), "a completion names a request of the batch");
                assert!(kernel.0 > 0, "a completion of a request the kernel owned");
                kernel.0 -= 1;
                let res = cqe.result();
                let res = if res < 0 {
                    Err(std::io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                };
                if reqs[i].complete(res, Some(c)) {
                    todo.push_back(i);
                }
            }
        }
        assert!(
            most <= self.depth,
            "never more in flight than the ring's depth"
        );
        most
    }
}

/// How many requests of a batch the kernel owns. Dropped while it owns
/// any (a panic unwinding out of the batch), it aborts the process: the
/// requests' buffers and iovecs would be freed, or the ring reused, while
/// the kernel still reads and writes them.
struct KernelOwned(usize);

impl KernelOwned {
    /// Reports `why` on stderr, without a panic if that fails, and aborts.
    fn abort(&self, why: &str) -> ! {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "directkv: io_uring {why} with {} requests in flight; their buffers cannot be \
             proven free, aborting",
            self.0
        );
        std::process::abort();
    }
}

impl Drop for KernelOwned {
    fn drop(&mut self) {
        if self.0 > 0 {
            self.abort("batch unwound");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch that unwinds while the kernel owns one of its requests
    /// aborts the process instead (run in a child: the parent sees it die
    /// of SIGABRT).
    #[test]
    fn a_batch_unwinding_with_requests_in_flight_aborts() {
        const CHILD: &str = "DIRECTKV_KERNEL_OWNED_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let _owned = KernelOwned(1);
            panic!("a bug while the kernel owns a request");
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "io::aio::uring::tests::a_batch_unwinding_with_requests_in_flight_aborts",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("batch unwound with 1 requests in flight"),
            "{err}"
        );
        // Nothing in flight: the guard lets a batch go.
        drop(KernelOwned(0));
    }
}
