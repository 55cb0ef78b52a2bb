//! Online compaction: moving the pages in use out of the data file's end
//! into free pages nearer its start, then cutting the file, while
//! transactions run (docs/compaction.md has the design and its proof).
//!
//! A compaction picks a boundary `B` (the pages in use plus slack) and
//! runs in steps, each an internal commit of bounded work
//! ([`super::txn::step`]):
//! 1. **Start**: the root state gets the compaction (`B` and an epoch `E`,
//!    the log's end then) and an empty free list. From here on a page freed
//!    below `B` is listed marked `E`, one freed at or past `B` is set aside
//!    on no list, and allocations take listed pages (all below `B`) or
//!    grow the file ([`super::txn::commit`]'s `free_sets`).
//! 2. **Scan**: pages `1..B` in runs of [`SCAN_STEP_PAGES`]; each free page
//!    not marked `E` (the old list's) is listed. Idempotent: after a crash
//!    the scan starts again from page 1.
//! 3. **Walk**: passes over every tree (the default keyspace, the catalog,
//!    every table, dropped ones too) leaf by leaf in key order, moving
//!    each page at or past `B` on a leaf's path, the leaf and its overflow
//!    chains into listed pages ([`crate::btree::tree::relocate_along`]).
//! 4. **Finish**: once the scan is done and a whole pass ran with no page
//!    allocated at or past `B` (the page count did not move), no page at
//!    or past `B` is in use; one commit sets the page count to `B` and
//!    ends the compaction. A checkpoint then names the smaller count, and
//!    only after it is the file cut: recovery never replays a change to a
//!    page the cut took.
//!
//! A compaction that cannot finish (the file grew during every one of
//! [`PASSES_MAX`] passes) raises `B` to the page count, lists what it set
//! aside, and ends without a cut. One stopped by its step limit, or by a
//! crash, stays in the root state and `CONTROL`; the next
//! [`Database::compact`](super::Database::compact) goes on with it.
//!
//! Invariants:
//! - Every page a pass visits (a leaf, the pages above it, its chains) is
//!   below `B` after its step; no page gains a visited key range without
//!   being visited (the tree never merges, splits fill new pages, an
//!   emptied page's range goes to a neighbour the walk still reaches by
//!   key), so a pass during which nothing was allocated at or past `B`
//!   leaves no page in use there.
//! - The file is cut only to the page count, under the checkpoint and tree
//!   locks, with `CONTROL` naming no more pages and no backup copying.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

pub(super) mod progress;

use super::checkpoint::run::Pace;
use super::engine::Inner;
use super::records::Compaction;
use super::txn::commit::{CommitCtx, PoolPages};
use super::txn::step::Outcome;
use super::txn::tables::{self, TableState, Tree};
use crate::btree::tree::{self, Relocated};
use crate::buffer::{Access, WriteCause};
use crate::constants::PAGE_COUNT_MIN;
use crate::error::{Error, Result};
use crate::format::PageId;
use crate::io::Storage;
use crate::sched::IoClass;
use progress::Cursor;
use progress::Progress;

/// Pages one scan step looks at, at most (and at most a quarter of the
/// cache: a step holds every page it lists).
const SCAN_STEP_PAGES: u64 = 64;
/// Pages one walk step moves, at most (and at most a sixteenth of the
/// cache: a move holds the copy, the freed page and the pointer's page).
const MOVES_PER_STEP: usize = 4;
/// Leaves one walk step visits at most.
const LEAVES_PER_STEP: usize = 16;
/// Passes before a compaction the file's growth keeps from finishing
/// gives up its cut.
const PASSES_MAX: u64 = 4;
/// The least slack left below the boundary for the pages commits allocate
/// while the compaction runs.
const SLACK_PAGES_MIN: u64 = 64;
/// The slack as a fraction of the pages in use (1/16).
const SLACK_SHIFT: u32 = 4;
/// A file is compacted only when at least this fraction of it (1/16) and
/// [`SLACK_PAGES_MIN`] pages would go.
const GAIN_SHIFT: u32 = 4;
/// Bytes the file is cut by at most while the locks are held once (the
/// tree's lock among them: commits wait for each piece).
const CUT_PIECE_BYTES: u64 = 16 << 20;
/// How much longer than a step the pause after it is: steps take at most
/// a ninth of the time. A step holds the commit section and the tree's
/// lock, and a lock-free read that meets a structure change waits for the
/// lock: what a step costs the transactions beside it is about its share
/// of the time times half its length, so steps are short (a few moves)
/// and far apart. At 32 moves a step and a pause as long as the step,
/// commits beside a compaction ran at 0.34–0.85 their rate before it
/// (examples/compact, 1 GB, 8 clients).
const STEP_PAUSE_FACTOR: u32 = 8;
/// The least pause between two steps: the commits that waited for one
/// get the commit section before the next.
const STEP_PAUSE: Duration = Duration::from_micros(500);

/// How far one call of [`Database::compact_with`](super::Database::compact_with) goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactOptions {
    /// Stop after this many steps (each a short internal commit), leaving
    /// the compaction under way for a later call; `None`: until it ends.
    pub max_steps: Option<u64>,
}

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// The data file's length when the call began.
    pub file_bytes_before: u64,
    /// Its length when the call returned.
    pub file_bytes_after: u64,
    /// The page count when the call began.
    pub pages_before: u64,
    /// The page count when it returned.
    pub pages_after: u64,
    /// The page count the compaction cuts the file to (0: there was
    /// nothing to compact).
    pub boundary: u64,
    /// Pages in use moved below the boundary.
    pub pages_moved: u64,
    /// Free pages below the boundary put on the free list by the scan.
    pub pages_listed: u64,
    /// Walk passes over every tree.
    pub passes: u64,
    /// Internal commits made.
    pub steps: u64,
    /// Whether the compaction ended (false: stopped by `max_steps`; the
    /// next call goes on with it).
    pub finished: bool,
    /// Whether the file's cut waits for a backup that is copying pages
    /// (the next call cuts it).
    pub cut_deferred: bool,
    /// Microseconds spent in the steps (and their pauses).
    pub steps_us: u64,
    /// Microseconds the checkpoint before the cut took.
    pub checkpoint_us: u64,
    /// Microseconds the cut took.
    pub cut_us: u64,
}

/// Microseconds since `t`.
fn micros(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// How a walk step ended.
enum Walked {
    /// Mid-pass.
    Going,
    /// At the end of the pass.
    PassEnded,
    /// With no free page below the boundary left to move a page into.
    Starved,
}

/// The state of one call: what is done and what it reports.
struct Run {
    report: CompactReport,
    max_steps: u64,
    at: Progress,
}

impl Run {
    /// Counts a step; false once the call may make no more.
    fn step(&mut self) -> bool {
        if self.report.steps >= self.max_steps {
            return false;
        }
        self.report.steps += 1;
        true
    }
}

/// The boundary for a file of `page_count` pages of which `free` are free:
/// the pages in use and slack; `None` when too little would go.
pub(super) fn plan(page_count: u64, free: u64) -> Option<u64> {
    assert!(free < page_count, "the head page is never free");
    let used = page_count - 1 - free;
    let slack = (used >> SLACK_SHIFT).max(SLACK_PAGES_MIN);
    let boundary = (used + 1 + slack).max(PAGE_COUNT_MIN);
    let gain_min = (page_count >> GAIN_SHIFT).max(SLACK_PAGES_MIN);
    (boundary.saturating_add(gain_min) <= page_count).then_some(boundary)
}

impl<S: Storage> Inner<S> {
    /// Compacts the database (see the module docs).
    ///
    /// # Errors
    /// The errors of a commit or a checkpoint, and I/O errors of the cut;
    /// the database stops on those it cannot vouch past.
    pub(crate) fn compact(&self, opts: &CompactOptions) -> Result<CompactReport> {
        let kept = crate::health::lock(&self.compactor)?;
        self.compact_holding(kept, opts, true)
    }

    /// Runs up to `steps` steps of a compaction left under way (by a step
    /// limit or a crash), unless one runs already: the page cleaner's
    /// part, so that a compaction nobody resumes does not keep the pages
    /// it set aside from reuse. Returns whether it ran steps and the
    /// compaction is still under way (false when a `compact()` call runs
    /// it: the cleaner then has nothing to do here, and must not spin).
    ///
    /// # Errors
    /// As [`compact`](Self::compact).
    pub(crate) fn resume_compaction(&self, steps: u64) -> Result<bool> {
        // A poisoned tree lock is the next commit's to find and report.
        let under_way = self.txns.tree.read().is_ok_and(|m| m.compaction.is_some());
        if !under_way {
            return Ok(false);
        }
        let Ok(kept) = self.compactor.try_lock() else {
            return Ok(false);
        };
        let opts = CompactOptions {
            max_steps: Some(steps),
        };
        let report = self.compact_holding(kept, &opts, false)?;
        Ok(!report.finished)
    }

    /// [`compact`](Self::compact) holding the compactor's lock (`kept`);
    /// without `start`, it only goes on with a compaction under way.
    fn compact_holding(
        &self,
        mut kept: std::sync::MutexGuard<'_, Option<Progress>>,
        opts: &CompactOptions,
        start: bool,
    ) -> Result<CompactReport> {
        let began = Instant::now();
        let file = self.pool.file();
        let meta = *self.txns.tree.read()?;
        let mut run = Run {
            report: CompactReport {
                file_bytes_before: file.len()?,
                pages_before: meta.page_count,
                ..CompactReport::default()
            },
            max_steps: opts.max_steps.unwrap_or(u64::MAX),
            at: Progress::new(0),
        };
        let started = match meta.compaction {
            Some(c) => Some(c),
            None if start => self.start(&mut run)?,
            None => {
                return Ok(CompactReport {
                    finished: true,
                    ..run.report
                })
            }
        };
        if let Some(c) = started {
            run.at = match kept.take() {
                Some(p) if p.epoch == c.epoch => p,
                _ => Progress::new(c.epoch),
            };
            run.report.boundary = c.boundary;
            run.report.finished = self.compact_to_end(&mut run)?;
            if !run.report.finished {
                *kept = Some(run.at.clone());
            }
        } else {
            run.report.finished = true;
        }
        run.report.steps_us = micros(began);
        if run.report.finished {
            // The cut waits for a checkpoint naming the smaller count; its
            // writes go below the commits' and reads' I/O, paced as the
            // background checkpointer's where there is one.
            let began = Instant::now();
            let pace = match self.env.opts.background_threads {
                true => Pace::Paced,
                false => Pace::Background,
            };
            let one = self.ckpt.checkpointing.lock()?;
            let done = self.checkpoint_locked(&one, pace, WriteCause::Checkpoint);
            drop(one);
            self.vitals.health.observe(done)?;
            run.report.checkpoint_us = micros(began);
            let began = Instant::now();
            run.report.cut_deferred = !self.cut()?;
            run.report.cut_us = micros(began);
        }
        run.report.pages_after = self.txns.tree.read()?.page_count;
        run.report.file_bytes_after = file.len()?;
        Ok(run.report)
    }

    /// Begins a compaction when enough would go; returns it.
    fn start(&self, run: &mut Run) -> Result<Option<Compaction>> {
        if self.txns.tree.read()?.free_pages.is_none() {
            // A database last written by a build that did not count its
            // free pages: the check counts them and records the count
            // (unless a commit came between; the next call tries again).
            self.check()?;
        }
        let meta = *self.txns.tree.read()?;
        let Some(free) = meta.free_pages else {
            return Ok(None);
        };
        let Some(boundary) = plan(meta.page_count, free) else {
            return Ok(None);
        };
        if !run.step() {
            return Ok(None);
        }
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let counted = ctx.meta.free_pages.is_some();
            if ctx.meta.compaction.is_some() || ctx.meta.page_count < boundary || !counted {
                return Ok(Outcome::Skip(None));
            }
            // The log's end: past every epoch a free page carries.
            let epoch = self.log.wal().appended_lsn().get();
            assert!(epoch > 0, "a database's log has its first record");
            let c = Compaction { boundary, epoch };
            ctx.meta.compaction = Some(c);
            ctx.meta.freelist = PageId::ZERO;
            Ok(Outcome::Commit(Some(c)))
        };
        let (c, _) = self.run_step(apply, |_| Ok(()))?;
        Ok(c)
    }

    /// Runs the compaction under way to its end; returns false when the
    /// step limit stopped it first.
    fn compact_to_end(&self, run: &mut Run) -> Result<bool> {
        let mut last = STEP_PAUSE;
        loop {
            let Some(c) = self.txns.tree.read()?.compaction else {
                return Ok(true);
            };
            if !run.step() {
                return Ok(false);
            }
            // At most a ninth of the time in steps (the commit section and
            // the tree's lock are the transactions' too).
            std::thread::sleep((last * STEP_PAUSE_FACTOR).max(STEP_PAUSE));
            let began = std::time::Instant::now();
            if run.at.scanned < c.boundary {
                self.scan_step(run)?;
            } else if run.at.passes >= PASSES_MAX {
                self.give_up(run)?;
            } else {
                if !run.at.pass_open {
                    run.at.pass_start = self.txns.tree.read()?.page_count;
                    run.at.pass_open = true;
                }
                match self.walk_step(run, c.boundary)? {
                    Walked::Going => {}
                    Walked::Starved => {
                        // A pass given up: counted, so that starving
                        // passes end in giving the cut up too.
                        run.at.passes += 1;
                        self.raise(run, true)?;
                    }
                    Walked::PassEnded => {
                        run.at.pass_open = false;
                        run.at.passes += 1;
                        run.report.passes += 1;
                        if !self.finish(run)? && run.at.passes >= PASSES_MAX {
                            self.give_up(run)?;
                        }
                    }
                }
            }
            last = began.elapsed();
        }
    }

    /// One scan step (see the module docs).
    fn scan_step(&self, run: &mut Run) -> Result<()> {
        let from = run.at.scanned;
        let to = {
            let c = self.txns.tree.read()?.compaction;
            let c = c.expect("a scan runs during a compaction");
            (from + self.scan_step_pages()).min(c.boundary)
        };
        let pages: Vec<PageId> = (from..to).map(PageId::new).collect();
        self.pool
            .read_batch_as(&pages, Access::Scan, IoClass::Background);
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let mut listed = 0;
            for &no in &pages {
                listed += u64::from(ctx.list_unlisted(no)?);
            }
            Ok(match listed {
                0 => Outcome::Skip(0),
                n => Outcome::Commit(n),
            })
        };
        let (listed, _) = self.run_step(apply, |_| Ok(()))?;
        run.report.pages_listed += listed;
        run.at.scanned = to;
        Ok(())
    }

    /// One walk step; returns whether it ended a pass.
    fn walk_step(&self, run: &mut Run, boundary: u64) -> Result<Walked> {
        self.warm_walk(&run.at.cursor);
        let catalog = self.txns.tables.catalog();
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let mut cursor = run.at.cursor.clone();
            let (mut moved, mut leaves, mut ended, mut starved) = (0, 0, false, false);
            let most = self.moves_per_step();
            while moved < most && leaves < LEAVES_PER_STEP && !ended {
                if ctx.meta.freelist == PageId::ZERO && boundary < ctx.meta.page_count {
                    // No free page below the boundary while pages past it
                    // may need moving: a move would grow the file. The
                    // boundary must rise first.
                    starved = true;
                    break;
                }
                let Some(tree) = self.walked_tree(cursor.tree)? else {
                    ended = !self.next_tree(&mut cursor)?;
                    continue;
                };
                ctx.select(&tree)?;
                let budget = most - moved;
                let (next, n) = tree::relocate_along(ctx, &cursor.key, boundary, budget)?;
                ctx.settle();
                moved += n;
                leaves += 1;
                match next {
                    Relocated::Again => break,
                    Relocated::After(key) => cursor.key = key,
                    Relocated::End => ended = !self.next_tree(&mut cursor)?,
                }
            }
            write_moved_roots(ctx, catalog)?;
            let walked = match (ended, starved) {
                (_, true) => Walked::Starved,
                (true, false) => Walked::PassEnded,
                (false, false) => Walked::Going,
            };
            let done = (cursor, moved, walked);
            Ok(match ctx.held_pages() {
                0 => Outcome::Skip(done),
                _ => Outcome::Commit(done),
            })
        };
        let ((cursor, moved, walked), _) = self.run_step(apply, |_| Ok(()))?;
        run.report.pages_moved += moved as u64;
        run.at.cursor = match walked {
            Walked::Going => cursor,
            Walked::PassEnded | Walked::Starved => Cursor {
                tree: tables::DEFAULT,
                key: Vec::new(),
            },
        };
        Ok(walked)
    }

    /// Reads the pages the next walk step visits into the cache, outside
    /// the commit section (a hint: the step reads what it misses): the
    /// path to the cursor's leaf and the leaves after it under its parent.
    fn warm_walk(&self, cursor: &Cursor) {
        let root = match self.walked_tree(cursor.tree) {
            Ok(Some(Tree::Default)) => self.txns.shape.root(),
            Ok(Some(Tree::Table(t))) => t.root().unwrap_or(PageId::ZERO),
            _ => return,
        };
        let pages = PoolPages { pool: &self.pool };
        if let Ok(leaves) = tree::following_leaves(&pages, root, &cursor.key, LEAVES_PER_STEP) {
            self.pool
                .read_batch_as(&leaves, Access::Scan, IoClass::Background);
        }
    }

    /// Pages a scan step looks at: [`SCAN_STEP_PAGES`], or a quarter of a
    /// smaller cache.
    fn scan_step_pages(&self) -> u64 {
        let quarter = (self.pool.frames() / 4).max(1) as u64;
        quarter.min(SCAN_STEP_PAGES)
    }

    /// Pages a walk step moves at most: [`MOVES_PER_STEP`], or a sixteenth
    /// of a smaller cache.
    fn moves_per_step(&self) -> usize {
        (self.pool.frames() / 16).clamp(1, MOVES_PER_STEP)
    }

    /// The tree of id `id` if it has pages: the default keyspace, the
    /// catalog, or a table (live or dropped).
    fn walked_tree(&self, id: u32) -> Result<Option<Tree>> {
        let state = match id {
            tables::DEFAULT => return Ok(Some(Tree::Default)),
            tables::CATALOG => Some(Arc::clone(self.txns.tables.catalog())),
            id => self.txns.tables.get(id)?,
        };
        Ok(state.filter(|t| t.root().is_some()).map(Tree::Table))
    }

    /// Moves `cursor` to the start of the tree after its own; false when
    /// it was the last.
    fn next_tree(&self, cursor: &mut Cursor) -> Result<bool> {
        let next = match cursor.tree {
            tables::DEFAULT => Some(tables::CATALOG),
            id => {
                let all = self.txns.tables.all()?;
                all.iter().map(|t| t.id).find(|&t| t > id)
            }
        };
        cursor.key.clear();
        if let Some(id) = next {
            assert!(
                id > cursor.tree,
                "the walk goes through the trees in id order"
            );
            cursor.tree = id;
        }
        Ok(next.is_some())
    }

    /// Ends the compaction when the scan is done and nothing was allocated
    /// at or past the boundary since the pass began: the page count
    /// becomes the boundary. Returns whether it ended.
    fn finish(&self, run: &mut Run) -> Result<bool> {
        let pass_start = run.at.pass_start;
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let c = ctx.meta.compaction.expect("a compaction to finish");
            if ctx.meta.page_count != pass_start {
                return Ok(Outcome::Skip(false));
            }
            assert!(
                c.boundary <= ctx.meta.page_count,
                "a boundary within the file"
            );
            assert!(
                ctx.meta.freelist.get() < c.boundary,
                "a list below the boundary"
            );
            let cut = ctx.meta.page_count - c.boundary;
            if let Some(n) = ctx.meta.free_pages {
                // Every page at or past the boundary is free: set aside.
                let left = n.checked_sub(cut).ok_or_else(|| Error::Corruption {
                    path: "data".into(),
                    offset: c.boundary * self.pool.page_bytes() as u64,
                    page: Some(c.boundary),
                    detail: format!(
                        "a compaction cuts {cut} pages where the root state counts {n} free"
                    ),
                })?;
                ctx.meta.free_pages = Some(left);
            }
            ctx.meta.page_count = c.boundary;
            ctx.meta.compaction = None;
            Ok(Outcome::Commit(true))
        };
        let (ended, _) = self.run_step(apply, |_| Ok(()))?;
        Ok(ended)
    }

    /// Raises the boundary (the scan then lists what was set aside below
    /// it): with `replan`, to what the pages in use now need, when a cut is
    /// still worth it; else (or when not) to the page count, giving the cut
    /// up, so the compaction ends once nothing grew since.
    fn raise(&self, run: &mut Run, replan: bool) -> Result<()> {
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let mut c = ctx.meta.compaction.expect("a compaction to raise");
            let count = ctx.meta.page_count;
            let planned = match (replan, ctx.meta.free_pages) {
                (true, Some(free)) => plan(count, free).filter(|&b| b > c.boundary),
                _ => None,
            };
            c.boundary = planned.unwrap_or(count);
            assert!(c.boundary <= count, "a boundary within the file");
            ctx.meta.compaction = Some(c);
            Ok(Outcome::Commit(c.boundary))
        };
        let (boundary, _) = self.run_step(apply, |_| Ok(()))?;
        run.at.pass_start = boundary;
        run.at.pass_open = false;
        run.report.boundary = boundary;
        Ok(())
    }

    /// Ends the compaction without a cut: in one step, when what is left
    /// to scan up to the page count is one scan step's worth, raises the
    /// boundary to the page count, lists what is set aside there and ends
    /// it (so growth cannot outrun it); else raises the boundary, for the
    /// scan to catch up first.
    fn give_up(&self, run: &mut Run) -> Result<()> {
        let from = run.at.scanned;
        let count = self.txns.tree.read()?.page_count;
        if count.saturating_sub(from) > self.scan_step_pages() {
            return self.raise(run, false);
        }
        let pages: Vec<PageId> = (from..count).map(PageId::new).collect();
        self.pool
            .read_batch_as(&pages, Access::Scan, IoClass::Background);
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            let c = ctx.meta.compaction.expect("a compaction to give up");
            let count = ctx.meta.page_count;
            assert!(from <= c.boundary, "the scan reached the boundary");
            if count - from > self.scan_step_pages() {
                return Ok(Outcome::Skip(false));
            }
            ctx.meta.compaction = Some(Compaction {
                boundary: count,
                ..c
            });
            for no in (from..count).map(PageId::new) {
                ctx.list_unlisted(no)?;
            }
            ctx.meta.compaction = None;
            Ok(Outcome::Commit(true))
        };
        let (ended, _) = self.run_step(apply, |_| Ok(()))?;
        if !ended {
            return self.raise(run, false);
        }
        run.report.boundary = count;
        Ok(())
    }

    /// Cuts the data file to the page count (in pieces of
    /// [`CUT_PIECE_BYTES`]); false when a backup copying pages, or a
    /// `CONTROL` naming more pages, holds it off.
    fn cut(&self) -> Result<bool> {
        let pb = self.pool.page_bytes() as u64;
        loop {
            let _ckpt = self.ckpt.checkpointing.lock()?;
            let meta = self.txns.tree.write()?;
            if !crate::health::lock(&self.log_pins)?.is_empty() {
                return Ok(false);
            }
            if self.ckpt.control.lock()?.current().page_count > meta.page_count {
                return Ok(false);
            }
            let len = self.pool.file().len()?;
            let end = meta.page_count * pb;
            if len <= end {
                drop((meta, _ckpt));
                // Outside the locks: the cut is durable from here on.
                let synced = self.pool.file().admit(IoClass::Background, 0).sync_all();
                self.vitals.health.observe(synced)?;
                return Ok(true);
            }
            let piece = len.saturating_sub(CUT_PIECE_BYTES).max(end);
            let cut = self.pool.cut_file(piece.div_ceil(pb), IoClass::Background);
            drop((meta, _ckpt));
            self.vitals.health.observe(cut)?;
            std::thread::sleep(STEP_PAUSE);
        }
    }
}

/// Writes the info rows of the tables whose roots a walk step moved.
fn write_moved_roots<S: Storage>(
    ctx: &mut CommitCtx<'_, S>,
    catalog: &Arc<TableState>,
) -> Result<()> {
    let rows: Vec<_> = ctx
        .touched()
        .iter()
        .filter(|(&id, t)| id >= tables::FIRST_ID && t.before != t.now)
        .map(|(&id, t)| {
            // A move allocates one page and frees one, in the same tree.
            assert_eq!(t.pages, t.state.pages(), "a walk keeps a table's pages");
            let state = if t.state.is_live() {
                tables::LIVE
            } else {
                tables::DROPPED
            };
            (
                tables::info_key(id),
                tables::info_value(t.now, state, t.pages),
            )
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    ctx.select(&Tree::Table(Arc::clone(catalog)))?;
    for (key, row) in rows {
        tree::put_along(ctx, &key, &row, None)?;
        ctx.settle();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boundary leaves the pages in use and slack, and a file with
    /// little to give back is left alone.
    #[test]
    fn the_plan_keeps_slack_and_skips_small_gains() {
        assert_eq!(plan(10_000, 9_000), Some(999 + 1 + 64));
        assert_eq!(plan(100_000, 90_000), Some(9_999 + 1 + 624));
        assert_eq!(plan(10_000, 100), None, "1% free");
        assert_eq!(plan(100, 90), None, "fewer pages than the least gain");
        let b = plan(1 << 20, (1 << 20) - 2).expect("all free");
        assert_eq!(b, 1 + 1 + 64);
    }
}
