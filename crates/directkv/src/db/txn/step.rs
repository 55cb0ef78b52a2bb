//! Internal commits: bounded pieces of maintenance (freeing a dropped
//! table's pages, a compaction's scan and moves) applied in the commit
//! section like a transaction's commit, each logged with a commit record
//! of its own.
//!
//! A step first runs without reading the disk: a page it needs that is
//! not in the pool fails the attempt, which is rolled back; the page is
//! read outside the section and the step runs again. After
//! [`STEP_MISSES_MAX`] such misses its last attempt reads what it misses,
//! so a step always ends.
//!
//! Invariants:
//! - A step's changes are all applied and logged with its commit record,
//!   or none are (the attempt is rolled back).
//! - The tree's root state changes only as the step's commit, under the
//!   tree's lock.

use super::super::engine::Inner;
use super::commit::CommitCtx;
use crate::buffer::Access;
use crate::error::Result;
use crate::format::PageId;
use crate::io::Storage;
use crate::lsn::Lsn;

/// Attempts of a step that each find a page missing, before its last try
/// reads missing pages inside the section.
pub(crate) const STEP_MISSES_MAX: usize = 8;

/// What a step's apply decided: commit its changes, or none (rolled back,
/// nothing logged but an abort).
pub(crate) enum Outcome<T> {
    /// Commit what it changed (perhaps nothing: a commit record alone).
    Commit(T),
    /// Change nothing.
    Skip(T),
}

impl<S: Storage> Inner<S> {
    /// Runs `apply` as a step in the commit section (see the module docs),
    /// then `committed` with its result once its commit is logged, still
    /// under the tree's lock (what it publishes is seen with the commit);
    /// returns what `apply` returned and its commit record's end
    /// ([`Lsn::ZERO`] for a skipped step). `apply` may run several times:
    /// it must change nothing but the context until it returns.
    ///
    /// # Errors
    /// `apply`'s errors and the commit's; the database stops on those it
    /// cannot vouch past.
    pub(crate) fn run_step<T>(
        &self,
        mut apply: impl FnMut(&mut CommitCtx<'_, S>) -> Result<Outcome<T>>,
        committed: impl FnOnce(&T) -> Result<()>,
    ) -> Result<(T, Lsn)> {
        let mut committed = Some(committed);
        for attempt in 0..=STEP_MISSES_MAX {
            let section = self.txns.committer.lock()?;
            let last = attempt == STEP_MISSES_MAX;
            let r = self.step_in_section(&mut apply, &mut committed, last);
            drop(section);
            match self.vitals.health.observe(r)? {
                Ok(done) => return Ok(done),
                Err(page) => {
                    assert!(
                        attempt < STEP_MISSES_MAX,
                        "the last try reads what it misses"
                    );
                    drop(
                        self.vitals
                            .health
                            .observe(self.pool.read(page, Access::Normal))?,
                    );
                }
            }
        }
        unreachable!("the last attempt reads through")
    }

    /// One attempt of a step, in the commit section: `Err(page)` when it
    /// missed `page` (and was rolled back).
    fn step_in_section<T, F: FnOnce(&T) -> Result<()>>(
        &self,
        apply: &mut impl FnMut(&mut CommitCtx<'_, S>) -> Result<Outcome<T>>,
        committed: &mut Option<F>,
        read_through: bool,
    ) -> Result<std::result::Result<(T, Lsn), PageId>> {
        let mut meta = self.txns.tree.write()?;
        let horizon = Lsn::new(
            self.ckpt
                .fpi_horizon
                .load(std::sync::atomic::Ordering::Acquire),
        );
        let mut ctx = CommitCtx::new(
            self.commit_env(),
            *meta,
            self.vitals.counters.next_txn(),
            horizon,
        );
        ctx.read_through = read_through;
        match apply(&mut ctx) {
            Ok(Outcome::Commit(t)) => {
                let new_meta = ctx.meta;
                let lsn = ctx.commit()?;
                *meta = new_meta;
                if let Some(f) = committed.take() {
                    f(&t)?;
                }
                Ok(Ok((t, lsn)))
            }
            Ok(Outcome::Skip(t)) => {
                assert_eq!(ctx.held_pages(), 0, "a skipped step changed nothing");
                drop(ctx);
                Ok(Ok((t, Lsn::ZERO)))
            }
            Err(e) => {
                let missed = ctx.missed();
                ctx.rollback();
                match missed {
                    Some(page) => Ok(Err(page)),
                    None => Err(e),
                }
            }
        }
    }
}
