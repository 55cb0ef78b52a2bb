//! Named tables in a write transaction: creating, opening, renaming,
//! dropping and listing them, and [`TableMut`], the view that reads and
//! writes one (see [`super::super::tables`] for the catalog they change).
//!
//! A table's name is a row of the catalog, so DDL is ordinary writes of
//! that row: a create, rename or drop takes the name row's lock (as
//! `get_for_update`), so two transactions naming the same table queue and
//! the second sees the first's outcome; it commits or vanishes with the
//! transaction. What the commit section adds (a root for a new table, the
//! info rows, the registry) is in [`super::commit`].

use super::*;
use crate::db::txn::tables::{Table, TableInfo};

impl<'db, S: Storage> WriteTxn<'db, S> {
    /// Creates the table `name`, empty, and returns its handle. It exists
    /// for others once this transaction commits; until then only this
    /// transaction can use the handle.
    ///
    /// # Errors
    /// [`Error::TableExists`] when a table of that name exists (committed,
    /// or created by this transaction); [`Error::InvalidArgument`] for a
    /// name that is not 1 to 255 bytes without NUL; the errors of
    /// [`get_for_update`](Self::get_for_update) (the name's lock).
    pub fn create_table(&mut self, name: &str) -> Result<Table> {
        self.check_alive()?;
        tables::check_name(name)?;
        let catalog = self.catalog_tree();
        let key = tables::name_key(name);
        if self.get_for_update_in(&catalog, &key)?.is_some() {
            return Err(Error::TableExists { name: name.into() });
        }
        let state = self.inner.txns.tables.creating()?;
        let id = state.id;
        self.put_in(&catalog, &key, &tables::name_value(id))?;
        self.created.insert(id, Arc::clone(&state));
        self.tables.insert(id, Arc::clone(&state));
        assert!(!state.is_created(), "a new table is created at its commit");
        Ok(Table { state })
    }

    /// The table `name` as this transaction sees it: its own DDL, else its
    /// snapshot (under Serializable a read validated at commit, so a
    /// concurrent drop or rename of the name refuses the commit).
    ///
    /// # Errors
    /// [`Error::TableNotFound`]; [`Error::InvalidArgument`] for a bad name.
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.check_alive()?;
        tables::check_name(name)?;
        let v = self.get_in(&self.catalog_tree(), &tables::name_key(name))?;
        let Some(v) = v else {
            return Err(Error::TableNotFound { name: name.into() });
        };
        let id = tables::decode_name_value(&v, name)?;
        let state = match self.created.get(&id) {
            Some(s) => Arc::clone(s),
            None => self.registered(id, name)?,
        };
        let table = Table { state };
        self.check_readable(&Tree::Table(Arc::clone(&table.state)))?;
        Ok(table)
    }

    /// Renames the table `from` to `to`; its handles keep working (the id
    /// stays).
    ///
    /// # Errors
    /// [`Error::TableNotFound`] for `from`, [`Error::TableExists`] for `to`
    /// (in the latest committed state, or this transaction's); the errors
    /// of [`get_for_update`](Self::get_for_update) (both names' locks).
    pub fn rename_table(&mut self, from: &str, to: &str) -> Result<()> {
        self.check_alive()?;
        tables::check_name(from)?;
        tables::check_name(to)?;
        let catalog = self.catalog_tree();
        let (old, new) = (tables::name_key(from), tables::name_key(to));
        let Some(id) = self.get_for_update_in(&catalog, &old)? else {
            return Err(Error::TableNotFound { name: from.into() });
        };
        if from == to {
            return Ok(());
        }
        if self.get_for_update_in(&catalog, &new)?.is_some() {
            return Err(Error::TableExists { name: to.into() });
        }
        self.delete_in(&catalog, &old)?;
        self.put_in(&catalog, &new, &id)?;
        assert!(
            self.writes
                .contains_key(&tables::qualify(tables::CATALOG, &new)),
            "the new name is written"
        );
        Ok(())
    }

    /// Drops the table `name`: gone for every snapshot from this commit
    /// on. Snapshots older than the commit still read it whole; its pages
    /// are freed in the background, a bounded number per step, once no
    /// such snapshot is left. Handles of it fail from then on.
    ///
    /// # Errors
    /// [`Error::TableNotFound`]; the errors of
    /// [`get_for_update`](Self::get_for_update) (the name's lock).
    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        self.check_alive()?;
        tables::check_name(name)?;
        let catalog = self.catalog_tree();
        let key = tables::name_key(name);
        let Some(v) = self.get_for_update_in(&catalog, &key)? else {
            return Err(Error::TableNotFound { name: name.into() });
        };
        let id = tables::decode_name_value(&v, name)?;
        let state = match self.created.get(&id) {
            Some(s) => Arc::clone(s),
            None => self.registered(id, name)?,
        };
        self.delete_in(&catalog, &key)?;
        // Its writes would be freed with its pages: they are not applied.
        let (lo, hi) = tables::qualify_range(id, &Bound::Unbounded, &Bound::Unbounded);
        let doomed: Vec<Vec<u8>> = self
            .writes
            .range((lo, hi))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.writes.remove(&k);
        }
        assert!(
            !self.writes.keys().any(|k| tables::split(k).0 == id),
            "a dropped table's writes are not applied"
        );
        self.tables.insert(id, Arc::clone(&state));
        self.dropped.insert(id, state);
        Ok(())
    }

    /// The tables as this transaction sees them (its own DDL, else its
    /// snapshot), by name.
    ///
    /// # Errors
    /// As [`range`](Self::range)'s items.
    pub fn list_tables(&self) -> Result<Vec<TableInfo>> {
        self.check_alive()?;
        let (from, to) = txn::prefix_bounds(tables::NAME_PREFIX);
        list_tables(self.scan_in(&self.catalog_tree(), from, to))
    }

    /// The table `table` of this transaction: its keys, apart from every
    /// other table's and the default keyspace's, with the same
    /// operations, isolation and row locks.
    pub fn table<'t>(&'t mut self, table: &Table) -> TableMut<'t, 'db, S> {
        TableMut {
            txn: self,
            tree: Tree::Table(Arc::clone(&table.state)),
        }
    }

    /// The catalog's tree.
    fn catalog_tree(&self) -> Tree {
        Tree::Table(Arc::clone(self.inner.txns.tables.catalog()))
    }

    /// The registered table `id`, which the name row `name` names.
    fn registered(&self, id: u32, name: &str) -> Result<Arc<TableState>> {
        self.inner.txns.tables.get(id)?.ok_or_else(|| {
            // A name row without its table: an info row lost or a name row
            // no commit wrote.
            Error::Corruption {
                path: "catalog".into(),
                offset: 0,
                page: None,
                detail: format!("the name row of {name:?} names table {id}, which has no info row"),
            }
        })
    }

    /// Notes that it reaches `tree` (its writes, locks or DDL).
    pub(super) fn reach(&mut self, tree: &Tree) {
        if let Tree::Table(t) = tree {
            self.tables.entry(t.id).or_insert_with(|| Arc::clone(t));
        }
    }

    /// The tree of id `id`, which it reached.
    pub(super) fn tree_of(&self, id: u32) -> Tree {
        assert!(
            !self.dropped.contains_key(&id) || id == tables::CATALOG,
            "no write of a table it dropped is applied"
        );
        match id {
            tables::DEFAULT => Tree::Default,
            id => Tree::Table(Arc::clone(
                self.tables.get(&id).expect("a written table was reached"),
            )),
        }
    }

    /// Fails unless this transaction may read `tree`: its snapshot sees the
    /// table, or it created it, and it did not drop it.
    pub(super) fn check_readable(&self, tree: &Tree) -> Result<()> {
        let Tree::Table(t) = tree else {
            return Ok(());
        };
        let own = self.created.contains_key(&t.id);
        let seen = own || t.id == tables::CATALOG || t.visible_at(self.snap().csn());
        if !seen || self.dropped.contains_key(&t.id) {
            return Err(Error::TableNotVisible { id: t.id });
        }
        Ok(())
    }

    /// Fails unless this transaction may write `tree`: it created it, or
    /// a commit did and none dropped it (one that drops it before this
    /// transaction commits refuses the commit), and it did not drop it.
    pub(super) fn check_writable(&self, tree: &Tree) -> Result<()> {
        let Tree::Table(t) = tree else {
            return Ok(());
        };
        let own = self.created.contains_key(&t.id);
        let committed = t.is_created() && t.is_live();
        if !(own || committed) || self.dropped.contains_key(&t.id) {
            return Err(Error::TableNotVisible { id: t.id });
        }
        Ok(())
    }
}

/// The entries of a scan of the catalog's name rows, as tables.
pub(in crate::db) fn list_tables<S: Storage>(rows: RangeIter<'_, S>) -> Result<Vec<TableInfo>> {
    let mut out = Vec::new();
    for row in rows {
        let (k, v) = row?;
        let name = String::from_utf8(k[tables::NAME_PREFIX.len()..].to_vec()).map_err(|_| {
            Error::Corruption {
                path: "catalog".into(),
                offset: 0,
                page: None,
                detail: format!("a name row {k:?} is not UTF-8"),
            }
        })?;
        let id = tables::decode_name_value(&v, &name)?;
        out.push(TableInfo { name, id });
    }
    assert!(
        out.windows(2).all(|w| w[0].name < w[1].name),
        "names are listed once each, in order"
    );
    Ok(out)
}

/// One table of a write transaction
/// ([`WriteTxn::table`](crate::WriteTxn::table)): the operations of the
/// default keyspace's, on this table's keys.
pub struct TableMut<'t, 'db, S: Storage = crate::io::OsStorage> {
    txn: &'t mut WriteTxn<'db, S>,
    tree: Tree,
}

impl<'db, S: Storage> TableMut<'_, 'db, S> {
    /// Fails unless the table is this database's.
    fn owns(&self) -> Result<()> {
        match &self.tree {
            Tree::Table(t) => self.txn.inner.txns.tables.check_owns(t),
            Tree::Default => Ok(()),
        }
    }

    /// As [`WriteTxn::put`](crate::WriteTxn::put), in this table.
    ///
    /// # Errors
    /// As `WriteTxn::put`, and [`Error::TableNotVisible`] when the table
    /// was dropped (by this transaction, or by a commit).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.owns()?;
        self.txn.put_in(&self.tree, key, value)
    }

    /// As [`WriteTxn::delete`](crate::WriteTxn::delete), in this table.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.owns()?;
        self.txn.delete_in(&self.tree, key)
    }

    /// As [`WriteTxn::get`](crate::WriteTxn::get), in this table.
    ///
    /// # Errors
    /// As `WriteTxn::get`, and [`Error::TableNotVisible`] when the
    /// transaction's snapshot does not see the table.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.owns()?;
        self.txn.get_in(&self.tree, key)
    }

    /// As [`WriteTxn::get_for_update`](crate::WriteTxn::get_for_update),
    /// in this table.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.owns()?;
        self.txn.get_for_update_in(&self.tree, key)
    }

    /// As [`WriteTxn::range`](crate::WriteTxn::range), in this table; a
    /// table the transaction cannot read yields that error.
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = txn::bounds(&range);
        self.scan(from, to)
    }

    /// As [`WriteTxn::prefix`](crate::WriteTxn::prefix), in this table.
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = txn::prefix_bounds(prefix);
        self.scan(from, to)
    }

    fn scan(&self, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> RangeIter<'db, S> {
        // Checked before the scan: a refused one records no range read.
        let readable = self.owns().and_then(|()| self.txn.check_alive());
        match readable.and_then(|()| self.txn.check_readable(&self.tree)) {
            Ok(()) => self.txn.scan_in(&self.tree, from, to),
            Err(e) => {
                let tree = self.tree.clone();
                RangeIter::new(self.txn.inner, tree, (from, to), BTreeMap::new(), None).failing(e)
            }
        }
    }
}
