//! Where a commit's pages come from and go: the free list, the end of the
//! file, and, while a compaction is under way, the free pages it sets
//! aside (see `db::compact`).
//!
//! Without a compaction, a freed page goes on the free list (linked
//! through the free pages, newest first) and an allocation takes the
//! list's head, or grows the file when the list is empty.
//!
//! During a compaction of boundary `B` and epoch `E`:
//! - a page freed below `B` goes on the list marked with `E`;
//! - a page freed at or past `B` is formatted free (epoch 0) and set
//!   aside on no list: no allocation can hand it out, and the cut at the
//!   compaction's end takes it;
//! - the compaction's scan lists the free pages below `B` that carry
//!   another epoch (those on the list when it began, which it dropped):
//!   [`CommitCtx::list_unlisted`].
//!
//! Invariants:
//! - During a compaction every listed page is below `B` and carries `E`,
//!   and every free page not listed carries another epoch (so the scan
//!   lists each once and the check can tell them apart).
//! - The free-page count (`Meta::free_pages`) counts listed and set-aside
//!   pages alike: a page moves between the two without changing it.

use super::CommitCtx;
use crate::btree::tree::{free_next, free_unlisted, init_free, set_free_epoch, Pages};
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::{page, PageId};
use crate::io::Storage;

impl<S: Storage> CommitCtx<'_, S> {
    /// Takes a page for the selected tree, off the free list or past the
    /// file's end, and lets `init` format it.
    pub(super) fn take_free_page(&mut self, init: impl FnOnce(&mut [u8])) -> Result<PageId> {
        // A page off the free list or past the end is in no reader's path
        // but a stale one, which the free that unlinked it already ended.
        let head = self.meta.freelist;
        if head != PageId::ZERO {
            let next = self.read(head, Access::Normal, free_next)?;
            // A link read from disk: past the file, or back to its own
            // page, it would hand out a page that does not exist or twice.
            let end = self
                .meta
                .compaction
                .map_or(self.meta.page_count, |c| c.boundary);
            if next.get() >= end || next == head {
                return Err(self.env.pool.page_corruption(
                    head,
                    format!(
                        "the free page links to page {next}, not 0 or one of pages 1..{end} \
                         other than itself"
                    ),
                ));
            }
            self.meta
                .took_free(next)
                .map_err(|what| self.env.pool.page_corruption(head, what))?;
            let tree = self.current;
            self.change(head, false, |p| {
                p[page::PAGE_HEADER_BYTES..].fill(0);
                init(p);
                page::set_tree(p, tree);
            })?;
            self.count_pages(tree, 1)?;
            return Ok(head);
        }
        if self.meta.page_count >= crate::constants::PAGE_COUNT_MAX {
            return Err(Error::Unsupported {
                what: "a data file of more pages",
                detail: format!(
                    "the data file holds {} pages, the most a database may",
                    self.meta.page_count
                ),
            });
        }
        let no = PageId::new(self.meta.page_count);
        self.meta.page_count += 1;
        assert!(self.meta.page_count <= crate::constants::PAGE_COUNT_MAX);
        let tree = self.current;
        self.change(no, true, |p| {
            init(p);
            page::set_tree(p, tree);
        })?;
        self.count_pages(tree, 1)?;
        Ok(no)
    }

    /// Frees page `no` of the selected tree: onto the free list, or set
    /// aside when a compaction is cutting it off (see the module docs).
    pub(super) fn give_free_page(&mut self, no: PageId) -> Result<()> {
        self.reshape();
        let listed = self.meta.lists(no);
        let (next, epoch) = match (listed, self.meta.compaction) {
            (true, Some(c)) => (self.meta.freelist, c.epoch),
            (true, None) => (self.meta.freelist, 0),
            (false, _) => (PageId::ZERO, 0),
        };
        let owner = self.change(no, false, |p| {
            let owner = page::tree_of(p);
            init_free(p, next);
            set_free_epoch(p, epoch);
            owner
        })?;
        if owner != self.current {
            // Reached through the selected tree (a descent refuses another
            // tree's page; an overflow chain's link is the page's bytes).
            let what = format!("page of tree {owner} reached through tree {}", self.current);
            return Err(self.env.pool.page_corruption(no, what));
        }
        self.count_pages(owner, -1)?;
        self.meta
            .gave_free(no, listed)
            .map_err(|what| self.env.pool.page_corruption(no, what))?;
        Ok(())
    }

    /// Lists page `no`, a free page below the compaction's boundary that
    /// it has not listed yet (one of the list it dropped, or set aside
    /// before the boundary rose past it); returns false, changing nothing,
    /// for a page that is not such a page (in use, or listed already).
    ///
    /// # Errors
    /// As a page change.
    pub(crate) fn list_unlisted(&mut self, no: PageId) -> Result<bool> {
        let c = self
            .meta
            .compaction
            .expect("only a compaction lists set-aside pages");
        assert!(
            no != PageId::ZERO && no.get() < c.boundary,
            "a listed page is below the boundary"
        );
        if !self.read(no, Access::Scan, |p| free_unlisted(p, c.epoch))? {
            return Ok(false);
        }
        let next = self.meta.freelist;
        self.change(no, false, |p| {
            init_free(p, next);
            set_free_epoch(p, c.epoch);
        })?;
        self.meta.freelist = no;
        Ok(true)
    }
}
