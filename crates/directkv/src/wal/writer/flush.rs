//! The writer's flush path: checking for a failure, leading one group
//! flush (swap the buffers, write, sync, publish the durable end), and the
//! writes and zero-fills under it (see the parent module's states and
//! invariants).

use super::*;

/// A panic's payload, carried past the end of a flush.
type Panic = Box<dyn std::any::Any + Send>;

impl<S: Storage> Shared<S> {
    pub(super) fn check_failed(&self, st: &State, waiting_for: Option<Lsn>) -> Result<()> {
        if self.background_panicked.load(Ordering::Acquire) {
            return Err(Error::Poisoned {
                path: self.dir.clone(),
                cause: "a background thread of the WAL panicked".into(),
            });
        }
        let Some(f) = st.failure() else { return Ok(()) };
        match waiting_for {
            Some(lsn) if lsn <= f.unknown_until => Err(Error::CommitOutcomeUnknown {
                lsn,
                cause: f.cause.clone(),
            }),
            Some(_) if f.disk_full => Err(Error::DiskFull {
                op: crate::error::IoOp::Allocate,
                path: self.dir.clone(),
                offset: None,
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            }),
            _ => Err(Error::Poisoned {
                path: self.dir.clone(),
                cause: f.cause.clone(),
            }),
        }
    }

    /// Leads one flush of everything in the fill buffer. Called with the lock
    /// held and no flush under way; returns with the lock held again.
    pub(in crate::wal) fn lead_flush<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
    ) -> MutexGuard<'a, State> {
        assert!(
            matches!(st.phase, Phase::Open),
            "one flush at a time, never after a failure"
        );
        let data_end = st.fill.end();
        assert!(
            data_end >= st.durable,
            "the fill buffer starts past the durable log"
        );
        let held_records = st.fill.used > FLUSH_HEADER_RECORD_BYTES;
        let padded = Lsn::new(data_end.get().next_multiple_of(self.unit as u64));
        let pad_at = next_record_start(data_end);
        if pad_at.get() + RECORD_HEADER_BYTES <= padded.get() {
            let pad_len = (padded.get() - pad_at.get() - RECORD_HEADER_BYTES) as usize;
            let zeros = [0u8; 4096];
            st.fill.put(pad_at, kind::PAD, &zeros[..pad_len]);
        }
        let len = (padded.get() - st.fill.start.get()) as usize;
        assert!(
            len % self.unit == 0 && len <= st.fill.buf.len(),
            "a flush is whole I/O units"
        );
        let used = st.fill.used;
        st.fill.buf.as_mut_slice()[used..len].fill(0);
        let fresh = st
            .spare
            .take()
            .expect("a spare buffer while no flush is under way");
        let out = std::mem::replace(
            &mut st.fill,
            Buffer {
                buf: fresh,
                start: padded,
                used: 0,
            },
        );
        st.fill
            .put(padded, kind::FLUSH_HEADER, &padded.get().to_le_bytes());
        st.begin_flush(data_end);
        drop(st);
        let (result, panicked) = self.write_out_guarded(&out.buf, out.start, len);
        self.end_flush(out.buf, result, data_end, len, held_records);
        if let Some(p) = panicked {
            // The log has failed and its waiters know; the panic goes on
            // to the caller (whose database latches it).
            std::panic::resume_unwind(p);
        }
        lock(&self.state)
    }

    /// Ends the flush of the log up to `data_end` (`len` bytes written
    /// from `written`): publishes the durable end, or fails the log; then
    /// wakes the waiters.
    fn end_flush(
        &self,
        written: AlignedBuf,
        result: Result<(), FlushError>,
        data_end: Lsn,
        len: usize,
        held_records: bool,
    ) {
        let mut st = lock(&self.state);
        let failure = match result {
            Ok(()) => {
                assert!(data_end >= st.durable, "durability only grows");
                st.durable = data_end;
                self.durable.store(st.durable.get(), Ordering::Release);
                self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_written
                    .fetch_add(len as u64, Ordering::Relaxed);
                None
            }
            Err(e) => Some(failure_of(e, st.durable, data_end)),
        };
        let failed = failure.is_some();
        st.end_flush(written, failure, held_records);
        if st.unsealed && st.sealer_parked {
            // The first flush after the log was idle: the sealer times
            // the pause that may follow it.
            self.sealer.notify_one();
        }
        self.ends.mark_end();
        let generation = st.generation;
        // Waiters wake after the state's lock is let go, so that they do
        // not wake only to queue for the lock this thread still holds.
        drop(st);
        if failed {
            self.ends.wake_everyone();
        } else {
            self.ends.wake(generation);
        }
    }

    /// [`write_out`](Self::write_out), a panic in it (a bug) turned into a
    /// failed flush whose outcome is unknown, and returned beside it: the
    /// flush must end (`Flushing → Failed`) and wake its waiters, who would
    /// otherwise wait for it forever.
    fn write_out_guarded(
        &self,
        buf: &AlignedBuf,
        start: Lsn,
        len: usize,
    ) -> (Result<(), FlushError>, Option<Panic>) {
        let run = std::panic::AssertUnwindSafe(|| self.write_out(buf, start, len));
        match std::panic::catch_unwind(run) {
            Ok(result) => (result, None),
            Err(p) => {
                let failed = Error::Poisoned {
                    path: self.dir.clone(),
                    cause: "a WAL flush panicked".into(),
                };
                (Err(FlushError::MaybeWritten(failed)), Some(p))
            }
        }
    }

    /// Writes `len` bytes of `buf` at `start` (both unit-aligned), split across
    /// segments, then syncs every file written.
    fn write_out(&self, buf: &AlignedBuf, start: Lsn, len: usize) -> Result<(), FlushError> {
        // Every segment the flush needs exists before its first byte is
        // written: running out of space preparing one fails the flush with
        // nothing written (a definite failure, no torn record).
        assert!(len > 0, "a flush writes at least its header");
        let first = self.layout.segment_of(start);
        let last = self
            .layout
            .segment_of(Lsn::new(start.get() + len as u64 - 1));
        assert!(last >= first, "a flush spans segments in order");
        let mut files: Vec<Arc<ScheduledFile<S::File>>> = Vec::with_capacity(2);
        for segment in first..=last {
            files.push(
                self.segments
                    .writer_file(segment)
                    .map_err(FlushError::NothingWritten)?,
            );
        }
        let started = Instant::now();
        let written = self.write_synced(buf, start, len, &files);
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.flush_ns.fetch_add(took, Ordering::Relaxed);
        written.map_err(FlushError::MaybeWritten)
    }

    fn write_synced(
        &self,
        buf: &AlignedBuf,
        start: Lsn,
        len: usize,
        files: &[Arc<ScheduledFile<S::File>>],
    ) -> Result<()> {
        let first = self.layout.segment_of(start);
        // Each file's piece: (bytes done before it, bytes, LSN it starts at).
        let mut pieces = Vec::with_capacity(files.len());
        let mut done = 0usize;
        while done < len {
            let at = Lsn::new(start.get() + done as u64);
            let segment = self.layout.segment_of(at);
            let room = (self.layout.segment_start(segment + 1).get() - at.get()) as usize;
            let n = room.min(len - done);
            assert_eq!(
                segment - first,
                pieces.len() as u64,
                "one piece per segment"
            );
            pieces.push((done, n, at));
            done += n;
        }
        assert_eq!(done, len, "every byte of the flush is written");
        assert_eq!(pieces.len(), files.len(), "a file per segment written");
        // Every file's permit is held until the last sync is done: the log
        // is in flight, for the scheduler, until the flush is durable.
        let admitted: Vec<_> = files
            .iter()
            .zip(&pieces)
            .map(|(file, &(_, n, _))| file.admit(IoClass::Wal, n as u64))
            .collect();
        for (io, &(done, n, at)) in admitted.iter().zip(&pieces) {
            io.write_all_at(buf.io(done..done + n)?, self.layout.file_offset(at))?;
        }
        for io in &admitted {
            io.sync()?;
        }
        Ok(())
    }

    /// Overwrites `[from, to)` with zeros in every segment that exists, then
    /// syncs. Used once at open, before the first append.
    pub(super) fn zero_range(&self, from: Lsn, to: Lsn) -> Result<()> {
        assert!(
            from.get() % self.unit as u64 == 0,
            "zeroing starts at an I/O unit"
        );
        assert!(from <= to, "a range runs forward");
        let zeros = AlignedBuf::new(1 << 20, self.unit as u32)?;
        let mut at = from;
        let mut files: Vec<(u64, ScheduledFile<S::File>)> = Vec::new();
        while at < to {
            let segment = self.layout.segment_of(at);
            let seg_end = self.layout.segment_start(segment + 1).get();
            let n = (seg_end.min(to.get()) - at.get()).min(zeros.len() as u64) as usize;
            let n = n.next_multiple_of(self.unit).min(zeros.len());
            if files.last().is_none_or(|(s, _)| *s != segment) {
                // Only segments that exist hold stale bytes; none is made.
                let Some(file) = self.segments.existing_file(segment)? else {
                    at = Lsn::new(seg_end);
                    continue;
                };
                files.push((segment, file));
            }
            let (s, file) = files.last().expect("pushed above");
            assert_eq!(*s, segment, "zeroing the segment that holds `at`");
            file.write_all_at(IoClass::Wal, zeros.io(0..n)?, self.layout.file_offset(at))?;
            at = Lsn::new(at.get() + n as u64);
        }
        for (_, f) in &files {
            f.admit(IoClass::Wal, 0).sync_all()?;
        }
        Ok(())
    }
}

/// The log's failure after a flush of the log up to `data_end`, durable up
/// to `durable` before it, failed with `e`: the commits it may have made
/// durable have an unknown outcome.
fn failure_of(e: FlushError, durable: Lsn, data_end: Lsn) -> Failure {
    let (e, unknown_until, nothing_written) = match e {
        FlushError::NothingWritten(e) => (e, durable, true),
        FlushError::MaybeWritten(e) => (e, data_end, false),
    };
    assert!(
        durable <= unknown_until,
        "the unknown end lies past the durable one"
    );
    Failure {
        disk_full: nothing_written && matches!(e, Error::DiskFull { .. }),
        cause: e.to_string(),
        unknown_until,
    }
}
