//! The catalog's rows (see the table in [`super`]'s docs): their keys,
//! their encodings, and the scans that load them at open and for `check`.

// Table ids in keys are big-endian so that byte order is id order.
#![allow(clippy::big_endian_bytes)]

use std::collections::HashMap;
use std::ops::Bound;

use super::{Registry, DROPPED, FIRST_ID};
use crate::btree::tree::{self, Pages};
use crate::error::{Error, Result};
use crate::format::PageId;

/// The catalog key of a table's name row.
pub(crate) fn name_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(b'n');
    k.extend_from_slice(name.as_bytes());
    k
}

/// The prefix of every name row.
pub(crate) const NAME_PREFIX: &[u8] = b"n";

/// The catalog key of a table's info row.
pub(crate) fn info_key(id: u32) -> [u8; 5] {
    let mut k = [b'i'; 5];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The key of the row that holds the next table id.
pub(crate) const NEXT_ID_KEY: &[u8] = b"m";

/// The value of the next-id row.
pub(crate) fn next_id_value(id: u32) -> [u8; 4] {
    id.to_be_bytes()
}

/// The prefix of every info row.
pub(crate) const INFO_PREFIX: &[u8] = b"i";

/// Bytes of an info row's value.
const INFO_BYTES: usize = 17;

/// A table as its info row records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InfoRow {
    /// Its id.
    pub(crate) id: u32,
    /// Its root; `None` while it has no tree.
    pub(crate) root: Option<PageId>,
    /// Whether it was dropped (its pages are being freed).
    pub(crate) dropped: bool,
    /// Its pages: tree and overflow.
    pub(crate) pages: u64,
}

/// An info row's value: the table's root, state and pages.
pub(crate) fn info_value(root: Option<PageId>, state: u8, pages: u64) -> [u8; INFO_BYTES] {
    assert!(state <= DROPPED, "a state a row can hold");
    assert!(
        root.is_some() || pages == 0,
        "a table without a tree has no pages"
    );
    let mut v = [0u8; INFO_BYTES];
    v[..8].copy_from_slice(&root.map_or(0, PageId::get).to_le_bytes());
    v[8] = state;
    v[9..].copy_from_slice(&pages.to_le_bytes());
    v
}

/// A name row's value: the id.
pub(crate) fn name_value(id: u32) -> [u8; 4] {
    id.to_be_bytes()
}

/// Decodes a name row's value (`what` names the row for the error).
///
/// # Errors
/// [`Error::Corruption`] for a value that is not an id a table can have.
pub(crate) fn decode_name_value(v: &[u8], what: &str) -> Result<u32> {
    let id = <[u8; 4]>::try_from(v).map(u32::from_be_bytes);
    match id {
        Ok(id) if (FIRST_ID..u32::MAX).contains(&id) => Ok(id),
        _ => Err(catalog_corruption(format!(
            "the name row of {what} holds {v:?}, not a table id"
        ))),
    }
}

/// Decodes an info row.
///
/// # Errors
/// [`Error::Corruption`] for a row no build writes.
pub(crate) fn decode_info(k: &[u8], v: &[u8]) -> Result<InfoRow> {
    let id = k
        .get(1..)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes);
    let word = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().expect("eight bytes"));
    match (id, v.len(), v.get(8)) {
        (Some(id), INFO_BYTES, Some(&state))
            if (FIRST_ID..u32::MAX).contains(&id)
                && state <= DROPPED
                && (word(0) != 0 || word(9) == 0) =>
        {
            let root = word(0);
            Ok(InfoRow {
                id,
                root: (root != 0).then(|| PageId::new(root)),
                dropped: state == DROPPED,
                pages: word(9),
            })
        }
        _ => Err(catalog_corruption(format!(
            "an info row {k:?} holds {v:?}, not a root, a state and a page count"
        ))),
    }
}

/// A catalog row no build writes.
fn catalog_corruption(detail: String) -> Error {
    Error::Corruption {
        path: "catalog".into(),
        offset: 0,
        page: None,
        detail,
    }
}

/// Visits every row of the catalog rooted at `catalog` (0: none) whose
/// key starts with the one byte `prefix`, in key order.
fn scan_rows<P: Pages>(
    pages: &P,
    catalog: PageId,
    prefix: u8,
    mut visit: impl FnMut(Vec<u8>, Vec<u8>) -> Result<()>,
) -> Result<()> {
    if catalog == PageId::ZERO {
        return Ok(());
    }
    let mut from = Bound::Included(vec![prefix]);
    let hi = Bound::Excluded(vec![prefix + 1]);
    loop {
        let (batch, next) = tree::scan_forward(pages, catalog, &from, &hi)?;
        for (k, v) in batch {
            assert_eq!(k.first(), Some(&prefix), "a row of the prefix");
            visit(k, v)?;
        }
        match next {
            Some(b) => from = b,
            None => return Ok(()),
        }
    }
}

/// The names of the catalog's tables as its name rows hold them (the
/// latest committed), by id.
///
/// # Errors
/// Page errors; [`Error::Corruption`] for a name row no build writes.
pub(crate) fn names<P: Pages>(pages: &P, catalog: PageId) -> Result<HashMap<u32, String>> {
    let mut names = HashMap::new();
    scan_rows(pages, catalog, NAME_PREFIX[0], |k, v| {
        let name = String::from_utf8_lossy(&k[1..]).into_owned();
        let id = decode_name_value(&v, &name)?;
        match names.insert(id, name) {
            None => Ok(()),
            Some(other) => Err(catalog_corruption(format!(
                "table {id} has two names, {other:?} and another"
            ))),
        }
    })?;
    Ok(names)
}

/// Loads the registry of a database whose catalog is rooted at `catalog`
/// (0: none), from the catalog's info rows.
///
/// # Errors
/// Page errors; [`Error::Corruption`] for an info row no build writes.
pub(crate) fn load<P: Pages>(pages: &P, catalog: PageId) -> Result<Registry> {
    let mut tables: Vec<InfoRow> = Vec::new();
    scan_rows(pages, catalog, INFO_PREFIX[0], |k, v| {
        let row = decode_info(&k, &v)?;
        if tables.last().is_some_and(|t| t.id >= row.id) {
            return Err(catalog_corruption(format!("info row {k:?} out of order")));
        }
        tables.push(row);
        Ok(())
    })?;
    let mut next = FIRST_ID;
    scan_rows(pages, catalog, NEXT_ID_KEY[0], |k, v| {
        next = match (k.as_slice(), <[u8; 4]>::try_from(v.as_slice())) {
            (NEXT_ID_KEY, Ok(b)) if u32::from_be_bytes(b) >= FIRST_ID => u32::from_be_bytes(b),
            _ => return Err(catalog_corruption(format!("a row {k:?} holds {v:?}"))),
        };
        Ok(())
    })?;
    let names = names(pages, catalog)?;
    Ok(Registry::new(catalog, tables, &names, next))
}

#[cfg(test)]
mod tests {
    use super::super::LIVE;
    use super::*;

    /// Catalog rows decode what they encode and refuse what no build writes.
    #[test]
    fn catalog_rows_round_trip_and_are_checked() {
        let k = info_key(9);
        let v = info_value(Some(PageId::new(44)), DROPPED, 31);
        let row = |root, dropped, pages| InfoRow {
            id: 9,
            root,
            dropped,
            pages,
        };
        assert_eq!(
            decode_info(&k, &v).expect("valid"),
            row(Some(PageId::new(44)), true, 31)
        );
        assert_eq!(
            decode_info(&k, &info_value(None, LIVE, 0)).expect("valid"),
            row(None, false, 0)
        );
        let mut bad = v;
        bad[8] = 2;
        assert!(decode_info(&k, &bad).is_err());
        let mut pages_without_tree = info_value(None, LIVE, 0);
        pages_without_tree[9] = 1;
        assert!(decode_info(&k, &pages_without_tree).is_err());
        assert!(decode_info(&k, &v[..9]).is_err());
        assert!(decode_info(&info_key(1), &v).is_err());
        assert!(decode_info(&k[..3], &v).is_err());
        assert_eq!(decode_name_value(&name_value(5), "t").expect("valid"), 5);
        assert!(decode_name_value(&name_value(1), "t").is_err());
        assert!(decode_name_value(b"abc", "t").is_err());
    }
}
