//! Reading the log: records in LSN order from a starting point, and the decision
//! every recovery ends with: is the first invalid record the torn tail of the
//! last flush, or corruption in the middle of the log?
//!
//! The rule (docs/wal_format.md, "End of log"): the writer never starts a write
//! before the previous write's sync completed, and every write starts with a
//! flush-header record. So if a valid flush header exists past an invalid record
//! (within two maximal flushes, where the next one must start), that record was
//! synced before the later flush was written: it is corruption, reported with
//! segment and offset. If none exists, the invalid record is where the last
//! (interrupted) flush tore, and the log ends there.
//!
//! One exception is legitimate: after a recovery the writer resumes at the next
//! I/O-unit boundary past the end it found, leaving a gap. Its first flush
//! header's `resume_from` names the end it resumed from, so the reader jumps the
//! gap only when `resume_from` equals the position where it stopped.
//!
//! Its reads pass a scheduler like every other request: the database's, in
//! the class its caller reads for ([`WalReader::scheduled`]), or a FIFO one
//! of its own for a log read offline.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{
    kind, next_record_start, parse_segment_file_name, segment_file_name, DbId, Layout,
    RecordHeader, SegmentHeader, SegmentHeaderError, FLUSH_BYTES_MAX, FORMAT_BLOCK_BYTES,
    RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, RECORD_PAYLOAD_MAX, SEGMENT_BYTES_MAX,
    SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES,
};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirectIo, FileOptions, Storage, StorageFile, SyncMethod};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};

/// Bytes read from a segment at a time.
const CHUNK_BYTES: usize = 1 << 20;

/// Segment files a reader holds open at most, whatever the log's length:
/// it reads forward, and looks past a record's end into the next segment
/// or two at most, so the farthest from the one it wants is closed first
/// (and opened, its header checked again, if ever wanted again).
const SEGMENT_FILES_OPEN_MAX: usize = 4;

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where the record starts.
    pub lsn: Lsn,
    /// Its kind: below 16 the log's own framing ([`Record::is_framing`]),
    /// from 16 on its caller's.
    pub kind: u8,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl Record {
    /// The LSN just past the record: what a commit of it waits for.
    pub fn end(&self) -> Lsn {
        assert!(
            self.payload.len() <= RECORD_PAYLOAD_MAX,
            "records are decoded bounded"
        );
        Lsn::new(self.lsn.get() + RECORD_HEADER_BYTES + self.payload.len() as u64)
    }

    /// Whether the log wrote it for its own framing (a flush header or
    /// pad) rather than for its caller.
    pub fn is_framing(&self) -> bool {
        self.kind < kind::USER_MIN
    }
}

/// How the log ended, once [`WalReader::next_record`] returned `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// Where the next record would start: the end of the valid log.
    pub end: Lsn,
    /// Whether invalid bytes (a torn write) sat at the end, rather than zeros or
    /// the end of the segments present (a record that runs on into an absent
    /// segment is such an end too).
    pub torn: bool,
}

/// A record header found by a scan.
struct Found {
    lsn: Lsn,
    header: RecordHeader,
    payload_ok: bool,
}

enum Attempt {
    Valid(Record),
    Invalid { torn: bool },
    Missing,
}

struct Chunk {
    segment: u64,
    file_offset: u64,
    len: usize,
    buf: AlignedBuf,
}

/// Reads records from a WAL directory.
pub struct WalReader<S: Storage> {
    storage: S,
    dir: PathBuf,
    layout: Layout,
    db_id: Option<DbId>,
    files: HashMap<u64, Option<Arc<ScheduledFile<S::File>>>>,
    /// The scheduler its reads ask, and their class.
    sched: Arc<Scheduler>,
    class: IoClass,
    chunk: Option<Chunk>,
    pos: Lsn,
    tail: Option<Tail>,
    last_flush_header: Option<Lsn>,
}

impl<S: Storage> WalReader<S> {
    /// A reader of the log in `dir` starting at `from` (a record start: the
    /// redo point, or [`Lsn::ZERO`]). With `db_id`, segments of another database
    /// are an error; without, the first segment read fixes it.
    pub fn new(storage: S, dir: &Path, segment_bytes: u64, db_id: Option<DbId>, from: Lsn) -> Self {
        // Callers pass a size from validated options or a decoded header.
        assert!((SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&segment_bytes));
        assert_eq!(segment_bytes % SEGMENT_HEADER_BYTES, 0);
        WalReader {
            storage,
            dir: dir.to_path_buf(),
            layout: Layout { segment_bytes },
            db_id,
            files: HashMap::new(),
            sched: Scheduler::fifo(),
            class: IoClass::Read,
            chunk: None,
            pos: from,
            tail: None,
            last_flush_header: None,
        }
    }

    /// Sends its reads through `sched` as `class` requests (by default
    /// they ask a FIFO scheduler of the reader's own, as [`IoClass::Read`]).
    #[must_use]
    pub fn scheduled(mut self, sched: Arc<Scheduler>, class: IoClass) -> Self {
        assert!(self.files.is_empty(), "scheduled before the first read");
        self.sched = sched;
        self.class = class;
        self
    }

    /// Opens a reader on the oldest segment present, learning the segment size
    /// and database identity from its header. `Ok(None)` if there are no segments.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] when the oldest segment's header is bad.
    pub fn open_oldest(storage: S, dir: &Path) -> Result<Option<Self>> {
        Self::open_oldest_scheduled(storage, dir, Scheduler::fifo(), IoClass::Read)
    }

    /// As [`open_oldest`](Self::open_oldest), its reads (this search's
    /// included) asking `sched` as `class` requests.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] when the oldest segment's header is bad.
    pub fn open_oldest_scheduled(
        storage: S,
        dir: &Path,
        sched: Arc<Scheduler>,
        class: IoClass,
    ) -> Result<Option<Self>> {
        let segments = list_segments(&storage, dir)?;
        let mut first_error = None;
        for n in segments {
            let path = dir.join(segment_file_name(n));
            let file =
                ScheduledFile::new(storage.open(&path, &read_options())?, Arc::clone(&sched));
            match read_segment_header(&file, class) {
                // A file re-headed for recycling but not yet renamed carries a
                // later number than its name: not where the log starts.
                Ok(h) if h.segment_no == n => {
                    let reader =
                        Self::new(storage, dir, h.segment_bytes, Some(h.db_id), h.first_lsn());
                    return Ok(Some(reader.scheduled(sched, class)));
                }
                Ok(_) => continue,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    /// The position after the last record returned.
    pub fn position(&self) -> Lsn {
        self.pos
    }

    /// How the log ended, once `next_record` returned `None`.
    pub fn tail(&self) -> Option<Tail> {
        self.tail
    }

    /// The start of the last flush header read: the last flush began there.
    pub fn last_flush_header(&self) -> Option<Lsn> {
        self.last_flush_header
    }

    /// The segment size this reader expects.
    pub fn segment_bytes(&self) -> u64 {
        self.layout.segment_bytes
    }

    /// The database identity, once known.
    pub fn db_id(&self) -> Option<DbId> {
        self.db_id
    }

    /// The next record, flush headers and pads included; `None` at the end.
    ///
    /// # Errors
    /// [`Error::Corruption`] for an invalid record followed by a later flush (the
    /// log went on after it was synced), for a segment of another database, or a
    /// damaged segment header; I/O errors as they come.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if self.tail.is_some() {
            return Ok(None);
        }
        let mut at = next_record_start(self.pos);
        assert!(at >= self.pos, "the reader only moves forward");
        if at > self.pos && !self.gap_is_zero(self.pos, at)? {
            // The writer zeroes the bytes it skips; anything else there is damage.
            return self.invalid_at(at, true);
        }
        loop {
            match self.attempt(at)? {
                Attempt::Valid(rec) => {
                    if rec.kind == kind::FLUSH_HEADER {
                        self.last_flush_header = Some(rec.lsn);
                    }
                    assert_eq!(rec.lsn, at);
                    assert!(rec.end() > self.pos, "the reader only moves forward");
                    self.pos = rec.end();
                    return Ok(Some(rec));
                }
                Attempt::Missing => {
                    self.tail = Some(Tail {
                        end: at,
                        torn: false,
                    });
                    return Ok(None);
                }
                Attempt::Invalid { torn } => match self.find_flush_header_after(at)? {
                    None => {
                        self.tail = Some(Tail { end: at, torn });
                        return Ok(None);
                    }
                    Some((next, resume_from)) if resume_from == at => {
                        assert!(next > at, "a gap is jumped forward");
                        at = next;
                    }
                    Some((next, _)) => return Err(self.corruption(at, next)),
                },
            }
        }
    }

    fn invalid_at(&mut self, at: Lsn, torn: bool) -> Result<Option<Record>> {
        match self.find_flush_header_after(at)? {
            None => {
                self.tail = Some(Tail { end: at, torn });
                Ok(None)
            }
            Some((next, resume_from)) if resume_from == at => {
                assert!(next > at && at >= self.pos, "a gap is jumped forward");
                self.pos = next;
                self.next_record()
            }
            Some((next, _)) => Err(self.corruption(at, next)),
        }
    }

    fn gap_is_zero(&mut self, from: Lsn, to: Lsn) -> Result<bool> {
        let mut gap = [0u8; RECORD_HEADER_BYTES as usize];
        assert!(from < to);
        let n = (to.get() - from.get()) as usize;
        assert!(n < gap.len(), "record gaps are shorter than a header");
        Ok(!self.read_bytes(from, &mut gap[..n])? || gap[..n].iter().all(|&b| b == 0))
    }

    /// The next record of a caller's kind (flush headers and pads skipped).
    ///
    /// # Errors
    /// As [`next_record`](Self::next_record).
    pub fn next_user_record(&mut self) -> Result<Option<Record>> {
        while let Some(rec) = self.next_record()? {
            if rec.kind >= kind::USER_MIN {
                return Ok(Some(rec));
            }
        }
        Ok(None)
    }

    fn corruption(&self, at: Lsn, later: Lsn) -> Error {
        let segment = self.layout.segment_of(at);
        Error::Corruption {
            path: self.dir.join(segment_file_name(segment)),
            offset: self.layout.file_offset(at),
            page: None,
            detail: format!(
                "invalid WAL record at LSN {at}, but the log continues with a valid flush at \
                 LSN {later}: the record was synced before that flush was written, so this \
                 is corruption, not a torn tail; refusing to truncate acknowledged commits"
            ),
        }
    }

    fn attempt(&mut self, at: Lsn) -> Result<Attempt> {
        // Headers sit at 8-aligned LSNs, never across a block and so never
        // across a segment (segments hold whole blocks).
        assert_eq!(at.get() % RECORD_ALIGN_BYTES, 0);
        assert!(FORMAT_BLOCK_BYTES - at.get() % FORMAT_BLOCK_BYTES >= RECORD_HEADER_BYTES);
        let mut header = [0u8; RECORD_HEADER_BYTES as usize];
        if !self.read_bytes(at, &mut header)? {
            return Ok(Attempt::Missing);
        }
        let Some(h) = RecordHeader::decode(&header, at) else {
            return Ok(Attempt::Invalid {
                torn: header.iter().any(|&b| b != 0),
            });
        };
        let mut payload = vec![0u8; h.payload_len as usize];
        let payload_at = Lsn::new(at.get() + RECORD_HEADER_BYTES);
        if !self.read_bytes(payload_at, &mut payload)? {
            // The record runs on into a segment that is not there (an
            // archive whose next segment is not archived yet): no torn
            // bytes. Unless a later flush follows (a hole then), the log
            // ends where the record starts.
            return Ok(Attempt::Invalid { torn: false });
        }
        if crc32c::crc32c(&payload) != h.payload_crc {
            return Ok(Attempt::Invalid { torn: true });
        }
        if h.kind == kind::FLUSH_HEADER && flush_resume_from(&payload).is_none_or(|r| r > at) {
            return Ok(Attempt::Invalid { torn: true });
        }
        Ok(Attempt::Valid(Record {
            lsn: at,
            kind: h.kind,
            payload,
        }))
    }

    /// The first record valid at its position (header and payload) in
    /// segment `n`'s first [`RECORD_PAYLOAD_MAX`] bytes and a block: if the
    /// log was written there, a record starts within them.
    ///
    /// # Errors
    /// As [`next_record`](Self::next_record), for the segment's file.
    pub(crate) fn first_record_in_segment(&mut self, n: u64) -> Result<Option<Lsn>> {
        let from = self.layout.segment_start(n);
        let to = Lsn::new(from.get() + RECORD_PAYLOAD_MAX as u64 + FORMAT_BLOCK_BYTES);
        let mut at = from;
        while let Some(found) = self.scan_headers(at, to)? {
            assert!(found.lsn >= at && found.lsn < to, "found where it looked");
            if found.payload_ok {
                return Ok(Some(found.lsn));
            }
            at = Lsn::new(found.lsn.get() + RECORD_ALIGN_BYTES);
        }
        Ok(None)
    }

    /// What the flush that tore at the end of the log held past it: the
    /// records whose headers are valid at their positions, within the one
    /// flush that can have been under way. `None` before the end was found
    /// or when nothing was there.
    ///
    /// # Errors
    /// As [`next_record`](Self::next_record).
    pub fn discarded_tail(&mut self) -> Result<Option<super::DiscardedTail>> {
        let Some(tail) = self.tail else {
            return Ok(None);
        };
        let to = Lsn::new(tail.end.get() + FLUSH_BYTES_MAX);
        let (mut at, mut records, mut last_end) = (tail.end, 0u64, tail.end);
        while let Some(found) = self.scan_headers(at, to)? {
            records += 1;
            let end = found.header.end(found.lsn);
            assert!(end > last_end, "records found lie ever further on");
            last_end = end;
            at = if found.payload_ok {
                next_record_start(end)
            } else {
                Lsn::new(found.lsn.get() + RECORD_ALIGN_BYTES)
            };
        }
        Ok((records > 0).then(|| super::DiscardedTail {
            from: tail.end,
            bytes: last_end.get() - tail.end.get(),
            records,
        }))
    }

    /// The first position in `[from, to)` where a record header may start
    /// that holds one valid at that position, with whether its payload
    /// checks too. Stops at a segment that is not there.
    fn scan_headers(&mut self, from: Lsn, to: Lsn) -> Result<Option<Found>> {
        let mut at = Lsn::new(from.get().next_multiple_of(RECORD_ALIGN_BYTES));
        while at < to {
            let in_block = FORMAT_BLOCK_BYTES - at.get() % FORMAT_BLOCK_BYTES;
            if in_block < RECORD_HEADER_BYTES {
                at = Lsn::new(at.get() + in_block);
                continue;
            }
            let mut bytes = [0u8; RECORD_HEADER_BYTES as usize];
            if !self.read_bytes(at, &mut bytes)? {
                return Ok(None);
            }
            if bytes.iter().any(|&b| b != 0) {
                if let Some(header) = RecordHeader::decode(&bytes, at) {
                    let mut payload = vec![0u8; header.payload_len as usize];
                    let payload_ok = self
                        .read_bytes(Lsn::new(at.get() + RECORD_HEADER_BYTES), &mut payload)?
                        && crc32c::crc32c(&payload) == header.payload_crc;
                    return Ok(Some(Found {
                        lsn: at,
                        header,
                        payload_ok,
                    }));
                }
            }
            at = Lsn::new(at.get() + RECORD_ALIGN_BYTES);
        }
        Ok(None)
    }

    /// The first valid flush header at a block boundary in `(at, at + 2 × the
    /// largest flush]`, with its `resume_from`.
    fn find_flush_header_after(&mut self, at: Lsn) -> Result<Option<(Lsn, Lsn)>> {
        let mut x = (at.get() / FORMAT_BLOCK_BYTES + 1) * FORMAT_BLOCK_BYTES;
        let limit = at.get() + 2 * FLUSH_BYTES_MAX;
        assert!(x > at.get() && x % FORMAT_BLOCK_BYTES == 0);
        while x <= limit {
            let mut header = [0u8; RECORD_HEADER_BYTES as usize];
            if !self.read_bytes(Lsn::new(x), &mut header)? {
                return Ok(None);
            }
            if let Some(h) = RecordHeader::decode(&header, Lsn::new(x)) {
                if h.kind == kind::FLUSH_HEADER {
                    let mut payload = vec![0u8; h.payload_len as usize];
                    let ok = self.read_bytes(Lsn::new(x + RECORD_HEADER_BYTES), &mut payload)?
                        && crc32c::crc32c(&payload) == h.payload_crc;
                    if let Some(resume_from) = flush_resume_from(&payload).filter(|_| ok) {
                        assert!(x > at.get() && x <= limit);
                        return Ok(Some((Lsn::new(x), resume_from)));
                    }
                }
            }
            x += FORMAT_BLOCK_BYTES;
        }
        Ok(None)
    }

    /// Copies the log bytes at `lsn..lsn + out.len()` into `out`; `false` when a
    /// segment they lie in does not exist.
    fn read_bytes(&mut self, lsn: Lsn, out: &mut [u8]) -> Result<bool> {
        let mut done = 0usize;
        while done < out.len() {
            let at = Lsn::new(lsn.get() + done as u64);
            let segment = self.layout.segment_of(at);
            let offset = self.layout.file_offset(at);
            if !self.load_chunk(segment, offset)? {
                return Ok(false);
            }
            let chunk = self.chunk.as_ref().expect("load_chunk filled the chunk");
            assert!(chunk.segment == segment && offset >= chunk.file_offset);
            let from = (offset - chunk.file_offset) as usize;
            assert!(from < chunk.len, "the chunk covers the offset");
            let n = (chunk.len - from).min(out.len() - done);
            out[done..done + n].copy_from_slice(&chunk.buf.as_slice()[from..from + n]);
            done += n;
        }
        assert_eq!(done, out.len());
        Ok(true)
    }

    fn load_chunk(&mut self, segment: u64, offset: u64) -> Result<bool> {
        if let Some(c) = &self.chunk {
            if c.segment == segment
                && offset >= c.file_offset
                && offset < c.file_offset + c.len as u64
            {
                return Ok(true);
            }
        }
        let Some(file) = self.segment_file(segment)? else {
            return Ok(false);
        };
        let unit = u64::from(file.alignment().io_unit_bytes()).max(FORMAT_BLOCK_BYTES);
        assert!(unit.is_power_of_two() && unit <= CHUNK_BYTES as u64);
        assert!(offset >= SEGMENT_HEADER_BYTES && offset < self.layout.segment_bytes);
        let start = offset - offset % unit;
        let len = (CHUNK_BYTES as u64).min(self.layout.segment_bytes - start) as usize;
        assert!(
            len > (offset - start) as usize,
            "the chunk will cover the offset"
        );
        let mut buf = match self.chunk.take() {
            Some(c) if c.buf.unit_bytes() as u64 == unit => c.buf,
            _ => AlignedBuf::new(CHUNK_BYTES, unit as u32)?,
        };
        let got = file.read_at(
            self.class,
            buf.io_mut(0..len.next_multiple_of(unit as usize))?,
            start,
        )?;
        if got <= (offset - start) as usize {
            // The file is shorter than a segment: treat the rest as absent.
            return Ok(false);
        }
        assert!(got <= buf.len());
        self.chunk = Some(Chunk {
            segment,
            file_offset: start,
            len: got.min(len),
            buf,
        });
        Ok(true)
    }

    fn segment_file(&mut self, segment: u64) -> Result<Option<Arc<ScheduledFile<S::File>>>> {
        if !self.files.contains_key(&segment) {
            let path = self.dir.join(segment_file_name(segment));
            let file = if self.storage.exists(&path) {
                let file = ScheduledFile::new(
                    self.storage.open(&path, &read_options())?,
                    Arc::clone(&self.sched),
                );
                let header = read_segment_header(&file, self.class)?;
                self.check_header(&path, segment, &header)?;
                let len = file.len()?;
                if len != self.layout.segment_bytes {
                    return Err(Error::Corruption {
                        path,
                        offset: len.min(self.layout.segment_bytes),
                        page: None,
                        detail: format!(
                            "WAL segment {segment} is {len} bytes, not the {} every segment is \
                             allocated with: it was cut short or extended",
                            self.layout.segment_bytes
                        ),
                    });
                }
                self.close_farthest(segment);
                Some(Arc::new(file))
            } else {
                None
            };
            self.files.insert(segment, file);
        }
        debug_assert!(self.files.values().flatten().count() <= SEGMENT_FILES_OPEN_MAX);
        assert!(self.files.contains_key(&segment));
        Ok(self.files.get(&segment).and_then(Option::clone))
    }

    /// Closes open segment files, farthest from `segment` first, until
    /// one more may open within [`SEGMENT_FILES_OPEN_MAX`].
    fn close_farthest(&mut self, segment: u64) {
        loop {
            let open = self.files.iter().filter(|(_, f)| f.is_some());
            if open.clone().count() < SEGMENT_FILES_OPEN_MAX {
                return;
            }
            let far = open
                .map(|(&n, _)| n)
                .max_by_key(|&n| n.abs_diff(segment))
                .expect("a full set of open files has a farthest");
            assert_ne!(far, segment, "the segment wanted is not open yet");
            self.files.remove(&far);
        }
    }

    fn check_header(&mut self, path: &Path, segment: u64, h: &SegmentHeader) -> Result<()> {
        let bad = |detail: String| Error::Corruption {
            path: path.to_path_buf(),
            offset: 0,
            page: None,
            detail,
        };
        if h.segment_no != segment {
            return Err(bad(format!(
                "segment header says segment {} in the file of segment {segment}",
                h.segment_no
            )));
        }
        if h.segment_bytes != self.layout.segment_bytes {
            return Err(bad(format!(
                "segment size {} differs from the log's {}",
                h.segment_bytes, self.layout.segment_bytes
            )));
        }
        match self.db_id {
            Some(id) if id != h.db_id => Err(bad(
                "segment belongs to another database; it is never replayed here".into(),
            )),
            Some(_) => Ok(()),
            None => {
                self.db_id = Some(h.db_id);
                Ok(())
            }
        }
    }
}

/// Options for reading a segment: direct where possible, no syncing.
pub(crate) fn read_options() -> FileOptions {
    FileOptions {
        read_only: true,
        direct_io: DirectIo::Auto,
        sync: SyncMethod::None,
        ..FileOptions::default()
    }
}

/// Reads and decodes the header of an open segment, as a `class` request.
pub(crate) fn read_segment_header<F: StorageFile>(
    file: &ScheduledFile<F>,
    class: IoClass,
) -> Result<SegmentHeader> {
    let unit = file
        .alignment()
        .io_unit_bytes()
        .max(FORMAT_BLOCK_BYTES as u32);
    let mut buf = AlignedBuf::new(SEGMENT_HEADER_BYTES as usize, unit)?;
    assert_eq!(buf.len() as u64, SEGMENT_HEADER_BYTES);
    let got = file.read_at(class, buf.io_all_mut(), 0)?;
    assert!(got <= buf.len());
    let bad = |detail: String| Error::Corruption {
        path: file.path().to_path_buf(),
        offset: 0,
        page: None,
        detail,
    };
    if got < 64 {
        return Err(bad("segment file is shorter than its header".into()));
    }
    SegmentHeader::decode(buf.as_slice()).map_err(|e| match e {
        SegmentHeaderError::NotASegment => bad("not a directkv WAL segment header".into()),
        SegmentHeaderError::Version(found) => Error::FormatVersion {
            path: file.path().to_path_buf(),
            found,
            supported: super::format::FORMAT_VERSION,
        },
    })
}

/// The segment numbers present in `dir`, ascending.
pub(crate) fn list_segments<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<u64>> {
    let mut out: Vec<u64> = storage
        .list_dir(dir)?
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The `resume_from` LSN of a flush header's payload.
pub(crate) fn flush_resume_from(payload: &[u8]) -> Option<Lsn> {
    let bytes: [u8; 8] = payload.try_into().ok()?;
    Some(Lsn::new(u64::from_le_bytes(bytes)))
}
