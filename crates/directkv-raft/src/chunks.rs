//! [`SnapshotBytes`]: a snapshot's bytes as openraft reads, writes and
//! seeks them, kept as chunks in the database (see [`crate::snapshot`])
//! and moved one chunk at a time, each database call on the runtime's
//! blocking pool (or inline, with [`Exec::Inline`](crate::Exec::Inline)).
//!
//! States:
//!
//! - **receiving** (made by `begin_receiving_snapshot`): writes append;
//!   of the `len` bytes written, all but `tail` are stored as chunks; a
//!   seek back to `p` cuts the bytes to `p` (openraft sends again from
//!   there); a seek forward is refused. `poll_shutdown` stores the tail and
//!   moves to *stored*.
//! - **stored** (built, current, or received and shut down): `len` is
//!   fixed; a read pulls chunk `pos / CHUNK_BYTES` into `cached`; writes
//!   are refused.
//!
//! Invariants: at most two chunks in memory (the one held and one being
//! stored); while receiving, `tail` is shorter than a chunk and starts at
//! a chunk boundary; the chunks are pinned ([`ChunkPin`]) while the value
//! lives; at most one blocking job runs, and every poll first waits for it.

use std::future::Future;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

use crate::snapshot::{read_chunk, write_chunk, Writes, CHUNK_BYTES};
use crate::store::{ChunkPin, Db, Exec};
use crate::Error;

/// What a blocking job did.
enum Done {
    /// A chunk was stored.
    Stored,
    /// Chunk `n` was read.
    Read(u32, Vec<u8>),
    /// The start of a chunk was read back, to receive on from its end.
    Refill(Vec<u8>),
}

/// A snapshot's bytes, stored in the database as chunks and read or
/// written one chunk at a time: openraft's `SnapshotData` for
/// [`TypeConfig`](crate::TypeConfig).
pub struct SnapshotBytes {
    pin: ChunkPin,
    /// The bytes it holds (while receiving: written so far).
    len: u64,
    /// Where the next read or write goes.
    pos: u64,
    receiving: bool,
    /// Made by `begin_receiving_snapshot` (and maybe shut down since).
    received: bool,
    /// A stored chunk read: its number and bytes.
    cached: Option<(u32, Vec<u8>)>,
    /// While receiving: the bytes of the chunk not stored yet.
    tail: Vec<u8>,
    job: Option<Job>,
}

/// A blocking job: running on the pool, or run inline and done.
enum Job {
    Pool(JoinHandle<Result<Done, Error>>),
    Inline(Option<Result<Done, Error>>),
}

impl std::fmt::Debug for SnapshotBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBytes")
            .field("seq", &self.pin.seq)
            .field("len", &self.len)
            .field("receiving", &self.receiving)
            .finish_non_exhaustive()
    }
}

fn io_error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::other(e)
}

impl SnapshotBytes {
    /// The stored snapshot `pin` names, `len` bytes long.
    pub(crate) fn stored(pin: ChunkPin, len: u64) -> Self {
        SnapshotBytes {
            pin,
            len,
            pos: 0,
            receiving: false,
            received: false,
            cached: None,
            tail: Vec::new(),
            job: None,
        }
    }

    /// An empty snapshot to receive into the chunks `pin` names.
    pub(crate) fn receiving(pin: ChunkPin) -> Self {
        SnapshotBytes {
            receiving: true,
            received: true,
            ..Self::stored(pin, 0)
        }
    }

    /// Its length in bytes (while receiving: received so far).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn pin(&self) -> &ChunkPin {
        &self.pin
    }

    /// Whether it was received into this database and shut down: its
    /// chunks are then the installed snapshot's, as they are.
    pub(crate) fn received_into(&self, db: &Db) -> bool {
        assert!(self.job.is_none(), "an install waits for the last write");
        std::sync::Arc::ptr_eq(&self.pin.db, db) && self.received && !self.receiving
    }

    fn chunk_of(offset: u64) -> u32 {
        u32::try_from(offset / CHUNK_BYTES as u64).expect("a snapshot is under 4 Pi bytes")
    }

    fn spawn(&mut self, f: impl FnOnce(&Db, u64) -> Result<Done, Error> + Send + 'static) {
        assert!(self.job.is_none(), "one job at a time");
        let (db, seq) = (self.pin.db.clone(), self.pin.seq);
        self.job = Some(match db.exec {
            Exec::BlockingPool => Job::Pool(tokio::task::spawn_blocking(move || f(&db, seq))),
            Exec::Inline => Job::Inline(Some(f(&db, seq))),
        });
    }

    /// Waits for the running job, if any, and takes in what it did.
    fn poll_job(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(job) = self.job.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let done = match job {
            Job::Pool(handle) => ready!(Pin::new(handle).poll(cx)).map_err(io_error)?,
            Job::Inline(done) => done.take().expect("an inline job is taken in once"),
        };
        self.job = None;
        match done.map_err(io_error)? {
            Done::Stored => {}
            Done::Read(n, bytes) => self.cached = Some((n, bytes)),
            Done::Refill(bytes) => {
                assert!(self.tail.is_empty(), "a refill starts a chunk");
                self.len += bytes.len() as u64;
                self.tail = bytes;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Copies from the held chunk if it holds `pos`; else starts reading it.
    fn read_held(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let n = Self::chunk_of(self.pos);
        let start = u64::from(n) * CHUNK_BYTES as u64;
        match &self.cached {
            Some((c, bytes)) if *c == n => {
                let off = (self.pos - start) as usize;
                let k = (bytes.len() - off).min(buf.remaining());
                assert!(k > 0, "a held chunk covers the position read");
                buf.put_slice(&bytes[off..off + k]);
                self.pos += k as u64;
                true
            }
            _ => {
                self.cached = None;
                let expected = (self.len - start).min(CHUNK_BYTES as u64) as usize;
                self.spawn(move |db, seq| {
                    let bytes = read_chunk(db, seq, n)?;
                    if bytes.len() != expected {
                        return Err(Error::Snapshot(format!(
                            "chunk {n} of snapshot {seq} is {} bytes, expected {expected}",
                            bytes.len()
                        )));
                    }
                    Ok(Done::Read(n, bytes))
                });
                false
            }
        }
    }

    /// Starts storing the tail as its chunk.
    fn store_tail(&mut self) {
        let stored = self.len - self.tail.len() as u64;
        assert_eq!(stored % CHUNK_BYTES as u64, 0, "the tail starts a chunk");
        let n = Self::chunk_of(stored);
        let bytes = std::mem::take(&mut self.tail);
        self.spawn(move |db, seq| {
            write_chunk(db, Writes::Beside, seq, n, &bytes)?;
            Ok(Done::Stored)
        });
    }

    /// Cuts the bytes received to `to`, reading back the start of its
    /// chunk when `to` is inside an already stored one.
    fn cut(&mut self, to: u64) -> io::Result<()> {
        if to > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a seek to {to}, past the {} bytes received", self.len),
            ));
        }
        let stored = self.len - self.tail.len() as u64;
        if to >= stored {
            self.tail.truncate((to - stored) as usize);
            self.len = to;
            return Ok(());
        }
        let n = Self::chunk_of(to);
        let keep = (to % CHUNK_BYTES as u64) as usize;
        self.tail.clear();
        self.len = to - keep as u64;
        if keep > 0 {
            self.spawn(move |db, seq| {
                let mut bytes = read_chunk(db, seq, n)?;
                if bytes.len() < keep {
                    return Err(Error::Snapshot(format!("chunk {n} of {seq} is short")));
                }
                bytes.truncate(keep);
                Ok(Done::Refill(bytes))
            });
        }
        Ok(())
    }
}

impl AsyncRead for SnapshotBytes {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.receiving {
            return Poll::Ready(Err(io_error("a snapshot is read once received whole")));
        }
        ready!(me.poll_job(cx))?;
        if me.pos >= me.len || buf.remaining() == 0 || me.read_held(buf) {
            return Poll::Ready(Ok(()));
        }
        // The chunk at `pos` is being read: copy from it once it is.
        ready!(me.poll_job(cx))?;
        let copied = me.read_held(buf);
        assert!(copied, "the chunk read holds the position");
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotBytes {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_job(cx))?;
        if !me.receiving {
            return Poll::Ready(Err(io_error("a stored snapshot is not written")));
        }
        let k = (CHUNK_BYTES - me.tail.len()).min(buf.len());
        me.tail.extend_from_slice(&buf[..k]);
        me.len += k as u64;
        me.pos = me.len;
        if me.tail.len() == CHUNK_BYTES {
            me.store_tail();
        }
        assert!(me.tail.len() < CHUNK_BYTES, "a full tail is being stored");
        Poll::Ready(Ok(k))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_job(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_job(cx))?;
        if me.receiving && !me.tail.is_empty() {
            me.store_tail();
            ready!(me.poll_job(cx))?;
        }
        assert!(me.tail.is_empty(), "every byte received is stored");
        me.receiving = false;
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotBytes {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let me = self.get_mut();
        if me.job.is_some() {
            return Err(io_error("a seek before the last one completed"));
        }
        let to = match position {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => me.len.checked_add_signed(d),
            SeekFrom::Current(d) => me.pos.checked_add_signed(d),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a seek out of range"))?;
        if me.receiving {
            me.cut(to)?;
        }
        me.pos = to;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let me = self.get_mut();
        ready!(me.poll_job(cx))?;
        assert!(
            !me.receiving || me.pos == me.len,
            "a snapshot being received is written at its end"
        );
        Poll::Ready(Ok(me.pos))
    }
}
