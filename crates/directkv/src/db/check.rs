//! The integrity check (RELIABILITY.md I4): walks the whole database and
//! proves its structure, without recursion.
//!
//! Checked: every page verifies (checksum, own number, identity) and passes
//! structural validation; keys are in order within pages and within the fence
//! keys their parents give; branches route to tree pages; overflow chains are
//! well formed; the free list holds free pages; and reachable pages, free pages
//! and the reserved page 0 together are every page exactly once (no page is
//! shared, leaked or outside the file); no page LSN is past the log's end.

use std::collections::HashSet;

use serde::Serialize;

use super::commit::PoolPages;
use super::engine::Inner;
use crate::btree::node::{self, Value};
use crate::btree::tree::{free_next, Pages, DEPTH_MAX};
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::page::{self, PageType, PAGE_HEADER_BYTES};
use crate::io::Storage;

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Pages in the file, per the root state.
    pub pages: u64,
    /// Tree pages (leaves and branches).
    pub tree_pages: u64,
    /// Overflow pages.
    pub overflow_pages: u64,
    /// Free pages.
    pub free_pages: u64,
    /// Keys.
    pub keys: u64,
    /// Tree depth.
    pub depth: u64,
}

fn bad(page: u64, what: impl Into<String>) -> Error {
    Error::Corruption {
        path: "data".into(),
        offset: page,
        detail: format!("integrity check, page {page}: {}", what.into()),
    }
}

struct Frame {
    page: u64,
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
    depth: u64,
}

impl<S: Storage> Inner<S> {
    pub(crate) fn check(&self) -> Result<CheckReport> {
        let meta = crate::health::read(&self.tree)?;
        let pages = PoolPages { inner: self };
        let end_lsn = self.log.durable_or_end();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut report = CheckReport {
            pages: meta.page_count,
            ..CheckReport::default()
        };
        let claim = |no: u64, seen: &mut HashSet<u64>| -> Result<()> {
            if no == 0 || no >= meta.page_count {
                return Err(bad(
                    no,
                    format!("outside the file's {} pages", meta.page_count),
                ));
            }
            if !seen.insert(no) {
                return Err(bad(no, "reached twice (shared page or cycle)"));
            }
            Ok(())
        };
        let mut stack = vec![Frame {
            page: meta.root,
            lo: None,
            hi: None,
            depth: 1,
        }];
        let mut overflow: Vec<(u64, u64)> = Vec::new();
        while let Some(f) = stack.pop() {
            claim(f.page, &mut seen)?;
            if f.depth as usize > DEPTH_MAX {
                return Err(bad(f.page, "deeper than the maximum"));
            }
            report.depth = report.depth.max(f.depth);
            report.tree_pages += 1;
            let children = pages.read(f.page, Access::Scan, |p| -> Result<Vec<Frame>> {
                node::validate(p).map_err(|e| bad(f.page, e))?;
                if page::page_lsn(p) > end_lsn {
                    return Err(bad(f.page, "page LSN past the end of the log"));
                }
                let n = node::count(p);
                for i in 0..n {
                    let k = node::key(p, i);
                    if f.lo.as_deref().is_some_and(|lo| k < lo)
                        || f.hi.as_deref().is_some_and(|hi| k >= hi)
                    {
                        return Err(bad(f.page, format!("key {i} outside its parent's fences")));
                    }
                }
                match node::page_type(p) {
                    Some(PageType::Leaf) => {
                        report.keys += n as u64;
                        for i in 0..n {
                            if let Value::Overflow { len, page } = node::value(p, i) {
                                overflow.push((page, u64::from(len)));
                            }
                        }
                        Ok(Vec::new())
                    }
                    Some(PageType::Branch) => {
                        let mut out = Vec::with_capacity(n + 1);
                        let first_hi = (n > 0).then(|| node::key(p, 0).to_vec()).or(f.hi.clone());
                        out.push(Frame {
                            page: node::leftmost(p),
                            lo: f.lo.clone(),
                            hi: first_hi,
                            depth: f.depth + 1,
                        });
                        for i in 0..n {
                            let hi = if i + 1 < n {
                                Some(node::key(p, i + 1).to_vec())
                            } else {
                                f.hi.clone()
                            };
                            out.push(Frame {
                                page: node::child(p, i),
                                lo: Some(node::key(p, i).to_vec()),
                                hi,
                                depth: f.depth + 1,
                            });
                        }
                        Ok(out)
                    }
                    _ => Err(bad(f.page, "not a tree page where the tree points")),
                }
            })??;
            stack.extend(children);
        }
        let chunk = (self.pool.page_bytes() - PAGE_HEADER_BYTES - 16) as u64;
        for (first, len) in overflow {
            let mut page = first;
            let mut left = len;
            for _ in 0..len.div_ceil(chunk).max(1) {
                claim(page, &mut seen)?;
                report.overflow_pages += 1;
                let (n, next) = pages
                    .read(page, Access::Scan, |p| {
                        let u =
                            |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().unwrap_or([0; 8]));
                        (
                            node::page_type(p),
                            u(PAGE_HEADER_BYTES + 8),
                            u(PAGE_HEADER_BYTES),
                        )
                    })
                    .map(|(t, n, next)| (t.map(|t| (t, n)), next))?;
                let Some((PageType::Overflow, n)) = n else {
                    return Err(bad(page, "expected an overflow page"));
                };
                if n > left || n > chunk {
                    return Err(bad(page, "overflow length out of range"));
                }
                left -= n;
                if left == 0 {
                    break;
                }
                page = next;
            }
            if left != 0 {
                return Err(bad(first, "overflow chain shorter than its value"));
            }
        }
        let mut page = meta.freelist;
        while page != 0 {
            claim(page, &mut seen)?;
            report.free_pages += 1;
            page = pages
                .read(page, Access::Scan, |p| {
                    (node::page_type(p) == Some(PageType::Free)).then(|| free_next(p))
                })?
                .ok_or_else(|| bad(page, "on the free list but not a free page"))?;
        }
        let accounted = seen.len() as u64 + 1;
        if accounted != meta.page_count {
            let leaked: Vec<u64> = (1..meta.page_count)
                .filter(|p| !seen.contains(p))
                .take(5)
                .collect();
            return Err(bad(
                leaked.first().copied().unwrap_or(0),
                format!(
                    "{} of {} pages are neither in the tree nor free (leaked: {leaked:?}...)",
                    meta.page_count - accounted,
                    meta.page_count
                ),
            ));
        }
        Ok(report)
    }
}
