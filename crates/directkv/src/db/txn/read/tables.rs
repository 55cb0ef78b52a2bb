//! Named tables in a read transaction: opening and listing them as of its
//! snapshot, and [`TableRef`], the view that reads one.

use super::*;
use crate::db::txn::tables::{self, Table, TableInfo, TableState};

impl<'db, S: Storage> ReadTxn<'db, S> {
    /// The table `name` as of the snapshot.
    ///
    /// # Errors
    /// [`Error::TableNotFound`] when the snapshot has no table of that
    /// name; [`Error::InvalidArgument`] for a bad name; as [`get`](Self::get).
    pub fn open_table(&self, name: &str) -> Result<Table> {
        tables::check_name(name)?;
        let catalog = Tree::Table(Arc::clone(self.inner.txns.tables.catalog()));
        let v = get_at(self.inner, &catalog, &self.snap, &tables::name_key(name))?;
        let Some(v) = v else {
            return Err(Error::TableNotFound { name: name.into() });
        };
        let id = tables::decode_name_value(&v, name)?;
        match self.inner.txns.tables.get(id)? {
            Some(state) if state.visible_at(self.snap.csn()) => Ok(Table { state }),
            // A name row of the snapshot names a table the engine does not
            // hold as of that snapshot: the catalog is damaged.
            _ => Err(Error::Corruption {
                path: "catalog".into(),
                offset: 0,
                page: None,
                detail: format!(
                    "the name row of {name:?} names table {id}, which has no info row of a \
                     table live at this snapshot"
                ),
            }),
        }
    }

    /// The tables of the snapshot, by name.
    ///
    /// # Errors
    /// As [`range`](Self::range)'s items.
    pub fn list_tables(&self) -> Result<Vec<TableInfo>> {
        let catalog = Tree::Table(Arc::clone(self.inner.txns.tables.catalog()));
        let (from, to) = prefix_bounds(tables::NAME_PREFIX);
        crate::db::txn::write::list_tables(self.scan_in(catalog, from, to))
    }

    /// The table `table` as of the snapshot: the read operations of the
    /// default keyspace's, on its keys.
    pub fn table<'t>(&'t self, table: &Table) -> TableRef<'t, 'db, S> {
        TableRef {
            txn: self,
            state: Arc::clone(&table.state),
        }
    }
}

/// One table of a read transaction ([`ReadTxn::table`]).
pub struct TableRef<'t, 'db, S: Storage = crate::io::OsStorage> {
    txn: &'t ReadTxn<'db, S>,
    state: Arc<TableState>,
}

impl<'db, S: Storage> TableRef<'_, 'db, S> {
    /// Fails unless the snapshot sees the table (of this database).
    fn check_visible(&self) -> Result<()> {
        self.txn.inner.txns.tables.check_owns(&self.state)?;
        match self.state.visible_at(self.txn.snap.csn()) {
            true => Ok(()),
            false => Err(Error::TableNotVisible { id: self.state.id }),
        }
    }

    /// As [`ReadTxn::get`], in this table.
    ///
    /// # Errors
    /// As `ReadTxn::get`, and [`Error::TableNotVisible`] when the snapshot
    /// does not see the table (created after it, or dropped before it).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_visible()?;
        let tree = Tree::Table(Arc::clone(&self.state));
        get_at(self.txn.inner, &tree, &self.txn.snap, key)
    }

    /// As [`ReadTxn::range`], in this table.
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = bounds(&range);
        self.scan(from, to)
    }

    /// As [`ReadTxn::prefix`], in this table.
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = prefix_bounds(prefix);
        self.scan(from, to)
    }

    fn scan(&self, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> RangeIter<'db, S> {
        let it = self
            .txn
            .scan_in(Tree::Table(Arc::clone(&self.state)), from, to);
        match self.check_visible() {
            Ok(()) => it,
            Err(e) => it.failing(e),
        }
    }
}
