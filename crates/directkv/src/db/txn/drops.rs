//! Freeing the pages of dropped tables: bounded steps, each an internal
//! commit of its own, once no snapshot that could read the table is left.
//!
//! A drop only marks the table (its info row says dropped; see
//! [`super::tables`]), so the dropping commit is as short as any. Its
//! pages go back to the free list afterwards, [`FREE_STEP_PAGES`] at a
//! time: each step takes the commit section as a commit does, frees the
//! tree's first leaf (with its overflow chains) and unlinks it, again
//! until it holds that many pages, then logs the pages and a commit record
//! and lets the section go. A crash between steps leaves the tree smaller
//! and still whole (every step is a commit), and the next open goes on
//! from the info row. The page cleaner runs the steps in the background;
//! without background threads, each commit runs one.
//!
//! Invariants:
//! - A table's pages are freed only once no live snapshot predates its
//!   drop, checked inside the commit section, where the drop is published
//!   (a snapshot registered later is of the drop or after it): no reader
//!   can reach them (a reader whose snapshot was given up checks that
//!   before each descent, and a step is a structure change that makes a
//!   descent beside it run again).
//! - A step holds at most [`FREE_STEP_PAGES`] pages of the table, plus
//!   the path it unlinks from and the catalog leaf of the info row.

use std::sync::Arc;

use super::super::engine::Inner;
use super::commit::{CommitCtx, PoolPages};
use super::step::Outcome;
use super::tables::{self, TableState, Tree};
use crate::btree::tree;
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::io::Storage;

/// Pages of a dropped table one step frees at most (a bounded hold of the
/// commit section: every commit waits for a step).
pub(crate) const FREE_STEP_PAGES: usize = 32;

/// The pause between two steps of one run of the freer: the commits that
/// waited for the first get the commit section before the second.
const STEP_PAUSE: std::time::Duration = std::time::Duration::from_micros(500);

impl<S: Storage> Inner<S> {
    /// Runs up to `steps` steps of freeing dropped tables; returns whether
    /// a dropped table is left (perhaps one a live snapshot still reads).
    ///
    /// # Errors
    /// The errors of a commit; the database stops on those it cannot vouch
    /// past.
    pub(crate) fn free_dropped(&self, steps: usize) -> Result<bool> {
        for _ in 0..steps {
            let Some(t) = self.next_to_free()? else {
                break;
            };
            if steps > 1 {
                // The commit section is no fair lock: a step taken right
                // after the last (of this run, or of the cleaner's pass
                // before) would starve the commits waiting for it.
                std::thread::sleep(STEP_PAUSE);
            }
            self.warm_step(&t);
            self.free_step(&t)?;
        }
        Ok(self.txns.tables.counts().1 > 0)
    }

    /// A dropped table no live snapshot can read, if there is one.
    fn next_to_free(&self) -> Result<Option<Arc<TableState>>> {
        let dropped = self.txns.tables.dropped()?;
        if dropped.is_empty() {
            return Ok(None);
        }
        let oldest = self.txns.versions.oldest_live()?;
        Ok(dropped.into_iter().find(|t| {
            let at = t.dropped_at().expect("a dropped table has its drop's CSN");
            // A snapshot at `s` reads the table while `s < at`.
            oldest.is_none_or(|s| s >= at)
        }))
    }

    /// Reads the pages the next step of freeing `t` changes into the
    /// cache, outside the commit section, so the step reads none inside it.
    fn warm_step(&self, t: &Arc<TableState>) {
        let Some(root) = t.root() else {
            return;
        };
        let pages = PoolPages { pool: &self.pool };
        let wanted = tree::pages_freed_next(&pages, root, FREE_STEP_PAGES);
        // A hint: a page it cannot read, the step reads (and reports).
        if let Ok(wanted) = wanted {
            self.pool.read_batch(&wanted, Access::Normal);
        }
    }

    /// One step of freeing `t` (see the module docs).
    fn free_step(&self, t: &Arc<TableState>) -> Result<()> {
        let catalog = self.txns.tables.catalog();
        let apply = |ctx: &mut CommitCtx<'_, S>| {
            assert!(!t.is_live(), "only a dropped table's pages are freed");
            let at = t.dropped_at().expect("a dropped table has its drop's CSN");
            // Here the drop is published: a snapshot that registers from now on
            // is of it or later and cannot see the table. One that registered
            // before, between the choice of this table and now, still can.
            assert!(self.txns.versions.visible() >= at, "the drop is published");
            if self.txns.versions.oldest_live()?.is_some_and(|s| s < at) {
                return Ok(Outcome::Skip((false, 0)));
            }
            let gone = free_pages(ctx, t, catalog)?;
            Ok(Outcome::Commit((gone, ctx.held_pages() as u64)))
        };
        let removed = |&(gone, _): &(bool, u64)| match gone {
            true => self.txns.tables.remove(t.id),
            false => Ok(()),
        };
        let ((_, freed), _) = self.run_step(apply, removed)?;
        let counters = &self.vitals.counters;
        counters
            .dropped_pages_freed
            .fetch_add(freed, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// Frees up to [`FREE_STEP_PAGES`] of `t`'s pages in `ctx` and writes its
/// info row (deleted once the tree is gone); returns whether it is.
fn free_pages<S: Storage>(
    ctx: &mut CommitCtx<'_, S>,
    t: &Arc<TableState>,
    catalog: &Arc<TableState>,
) -> Result<bool> {
    let before = t.root();
    let mut gone = before.is_none();
    if !gone {
        ctx.select(&Tree::Table(Arc::clone(t)))?;
        while !gone && ctx.held_pages() < FREE_STEP_PAGES {
            let budget = FREE_STEP_PAGES - ctx.held_pages();
            gone = tree::free_first_leaf(ctx, t.id, budget)?;
            ctx.settle();
        }
    }
    let (now, pages) = ctx
        .touched()
        .get(&t.id)
        .map_or((before, t.pages()), |x| (x.now, x.pages));
    if gone != (pages == 0) {
        return Err(Error::Corruption {
            path: "catalog".into(),
            offset: 0,
            page: None,
            detail: format!(
                "dropped table {}'s info row counts {pages} pages where {} are left",
                t.id,
                if gone { "none" } else { "some" }
            ),
        });
    }
    ctx.select(&Tree::Table(Arc::clone(catalog)))?;
    let key = tables::info_key(t.id);
    if gone {
        let found = tree::delete_along(ctx, &key, None)?;
        assert!(found, "a dropped table has its info row until it is freed");
    } else if now != before || pages != t.pages() {
        let row = tables::info_value(now, tables::DROPPED, pages);
        tree::put_along(ctx, &key, &row, None)?;
    }
    ctx.settle();
    Ok(gone)
}
