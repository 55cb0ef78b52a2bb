//! The commit of a write transaction: waiting for its reads' pages, the
//! commit section (validation, apply, the commit record) and waiting for
//! durability. Split from [`super`] (the transaction's reads, writes and
//! row locks), whose private state it shares as a child module.

use super::*;

impl<'db, S: Storage> WriteTxn<'db, S> {
    /// [`commit`](Self::commit), returning the LSN at the end of the
    /// commit record: the point `directkv restore --to-lsn` restores to for
    /// exactly the commits up to and including this one. A transaction that
    /// writes nothing writes no record; it returns the end of the last
    /// record appended, at or past the end of every commit it could have
    /// seen, and under `Durability::Sync` returns once the log is durable
    /// to there: a commit is visible before its sync, so this is how a
    /// caller knows that what it read survives a crash.
    ///
    /// # Errors
    /// As [`commit`](Self::commit).
    pub fn commit_lsn(mut self) -> Result<Lsn> {
        self.check_alive()?;
        let _guard = PanicGuard(&self.inner.vitals.health);
        let writes = std::mem::take(&mut self.writes);
        if writes.is_empty() {
            // Reads of the snapshot alone serialize at the snapshot; mixed
            // with latest values read under row locks, they must still be
            // the latest now (the locked ones cannot have changed).
            let mixed = !self.for_update.is_empty();
            let r = if mixed {
                self.validate(&writes)
            } else {
                Ok(())
            };
            self.end();
            self.count_refusal(r)?;
            return self.await_reads();
        }
        let (befores, trails) = self.warm(&writes)?;
        let lsn = self.commit_section(&writes, &befores, trails);
        self.committed = lsn.is_ok();
        self.end();
        assert!(self.locked.is_empty(), "row locks go before the sync");
        let lsn = match self.count_refusal(lsn) {
            Err(e) if e.is_retryable() => return Err(e),
            r => self.inner.vitals.health.observe(r)?,
        };
        // Its snapshot has ended (an iterator may still hold it) and its row
        // locks are gone: the versions no snapshot needs go now, outside
        // the commit section.
        self.inner
            .vitals
            .health
            .observe(self.inner.txns.versions.collect())?;
        self.await_durable(lsn)?;
        self.inner
            .vitals
            .counters
            .commits
            .fetch_add(1, Ordering::Relaxed);
        self.inner.after_commit();
        Ok(lsn)
    }

    /// Ends a commit that wrote nothing: returns the end of the last record
    /// appended to the log, at or past the end of every commit it could
    /// have read, once (under `Durability::Sync`) the log is durable to
    /// there. A commit is visible once its record is appended, before its
    /// sync (its row locks go then), so what this transaction read may not
    /// be durable yet; the wait, shared with the flush under way, is what
    /// lets its caller act on what it read. With nothing appended since the
    /// last sync it waits for nothing.
    fn await_reads(&self) -> Result<Lsn> {
        let end = self.inner.wal().appended_lsn();
        assert!(
            end <= self.inner.wal().end_lsn(),
            "what is appended is within the log"
        );
        self.await_durable(end)?;
        Ok(end)
    }

    /// Under `Durability::Sync`, waits until the log is durable to `lsn`
    /// (sharing the flush under way), counted as a wait for the WAL sync.
    fn await_durable(&self, lsn: Lsn) -> Result<()> {
        if self.durability() == Durability::Sync {
            let t = Instant::now();
            self.inner
                .vitals
                .health
                .observe(self.inner.log.flush_to_wal(lsn))?;
            self.inner.vitals.counters.wal_sync_wait.record(t.elapsed());
        }
        Ok(())
    }

    /// The durability its commit waits for.
    fn durability(&self) -> Durability {
        self.opts
            .durability
            .unwrap_or(self.inner.env.opts.durability)
    }

    /// Counts a commit refused with a retryable error (a conflict, or a
    /// snapshot given up) and passes the result on.
    pub(super) fn count_refusal<T>(&self, r: Result<T>) -> Result<T> {
        if r.as_ref().is_err_and(Error::is_retryable) {
            self.inner
                .vitals
                .counters
                .conflicts
                .fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Reads, outside every lock, the latest committed value of each key
    /// it writes: the before-images its commit stages for snapshots, with
    /// the trails of the descents that found them (in key order). A key
    /// read with `get_for_update` is not read again. Each key's row lock is
    /// held, so no other commit changes these values before this one; and
    /// the pages the commit will change are brought into the pool here
    /// (the cache misses of many transactions overlap).
    fn warm(
        &mut self,
        writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ) -> Result<(CommitVersions, Vec<Option<Traced>>)> {
        assert_eq!(
            self.locked.len(),
            self.locked.iter().collect::<BTreeSet<_>>().len(),
            "a row lock is held once"
        );
        let mut befores = Vec::with_capacity(writes.len());
        let mut trails = Vec::with_capacity(writes.len());
        for k in writes.keys() {
            let (before, trail) = match self.for_update.get_mut(k) {
                Some((v, traced)) => (v.clone(), traced.take()),
                None => {
                    let (id, key) = tables::split(k);
                    txn::get_committed_traced(self.inner, &self.tree_of(id), key)?
                }
            };
            befores.push((k.clone(), before));
            trails.push(trail);
        }
        assert_eq!(befores.len(), writes.len(), "a before-image per key");
        assert_eq!(trails.len(), writes.len(), "a trail, or none, per key");
        Ok((befores, trails))
    }

    /// Enters the commit section until an attempt needs no page it lacks;
    /// returns the commit record's LSN.
    fn commit_section(
        &self,
        writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        befores: &CommitVersions,
        trails: Vec<Option<Traced>>,
    ) -> Result<Lsn> {
        let inner = self.inner;
        // The first attempt follows the trails; one that missed a page
        // rolled back inside a structure change, which ends them anyway.
        let mut trails = Some(trails);
        for attempt in 0..=COMMIT_MISSES_MAX {
            let read_through = attempt == COMMIT_MISSES_MAX;
            // The versions to stage, copied before the gate: the section
            // holds no allocation it can do without.
            let staged = befores.clone();
            let t = Instant::now();
            let section = inner.txns.committer.lock()?;
            let entered = Instant::now();
            inner.vitals.counters.commit_wait.record(entered - t);
            let trails = trails.take().unwrap_or_default();
            let r = self.apply(writes, befores, staged, trails, read_through);
            drop(section);
            let held = u64::try_from(entered.elapsed().as_nanos()).unwrap_or(u64::MAX);
            inner
                .vitals
                .counters
                .commit_section_ns
                .fetch_add(held, Ordering::Relaxed);
            match r? {
                Applied::Done(lsn) => return Ok(lsn),
                Applied::Missed(page) => {
                    assert!(!read_through, "the last try reads what it misses");
                    inner
                        .vitals
                        .counters
                        .commit_misses
                        .fetch_add(1, Ordering::Relaxed);
                    drop(
                        inner
                            .vitals
                            .health
                            .observe(inner.pool.read(page, Access::Normal))?,
                    );
                }
            }
        }
        unreachable!("the last attempt reads through")
    }

    /// Validates and applies the transaction under the tree's write lock:
    /// its before-images staged for snapshots first (`staged`, a copy of
    /// `befores` made before the gate), then its pages changed (each key
    /// from its trail while the tree's structure is the one the trail was
    /// taken in, else from the root), then its commit published.
    fn apply(
        &self,
        writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        befores: &CommitVersions,
        staged: CommitVersions,
        trails: Vec<Option<Traced>>,
        read_through: bool,
    ) -> Result<Applied> {
        let inner = self.inner;
        let t = Instant::now();
        let mut meta = inner.txns.tree.write()?;
        inner.vitals.counters.tree_lock_wait.record(t.elapsed());
        self.validate(writes)?;
        self.check_tables_live()?;
        let horizon = Lsn::new(inner.ckpt.fpi_horizon.load(Ordering::Acquire));
        let mut ctx = CommitCtx::new(
            inner.commit_env(),
            *meta,
            inner.vitals.counters.next_txn(),
            horizon,
        );
        ctx.read_through = read_through;
        let csn = inner.txns.versions.visible() + 1;
        inner.txns.versions.stage(csn, staged)?;
        let applied = self
            .apply_writes(&mut ctx, writes, befores, trails)
            .and_then(|()| self.write_info_rows(&mut ctx));
        if let Err(e) = applied {
            let (missed, held) = (ctx.missed(), ctx.held_pages());
            ctx.rollback();
            inner.txns.versions.retract(csn);
            return match (missed, e) {
                (Some(page), _) => Ok(Applied::Missed(page)),
                (None, Error::CacheExhausted { frames }) => Err(Error::TransactionTooLarge {
                    pages: held,
                    frames,
                }),
                (None, e) => Err(e),
            };
        }
        let counts = ctx.counts();
        let new_meta = ctx.meta;
        let lsn = match ctx.commit() {
            Ok(lsn) => lsn,
            Err(e) => {
                inner.txns.versions.retract(csn);
                return Err(e);
            }
        };
        *meta = new_meta;
        self.publish_tables(writes, csn);
        // Published before the tree lock is let go.
        inner.txns.versions.publish(csn)?;
        inner.vitals.counters.add_page_records(counts);
        Ok(Applied::Done(lsn))
    }

    /// Applies its writes, table by table (qualified keys sort by table),
    /// each key from its trail while the structure is the one the trail was
    /// taken in.
    fn apply_writes(
        &self,
        ctx: &mut CommitCtx<'_, S>,
        writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        befores: &CommitVersions,
        trails: Vec<Option<Traced>>,
    ) -> Result<()> {
        let mut trails = trails.into_iter();
        let mut current = None;
        for ((q, v), (bq, before)) in writes.iter().zip(befores) {
            assert_eq!(q, bq, "before-images are in key order");
            let (id, key) = tables::split(q);
            if current != Some(id) {
                ctx.select(&self.tree_of(id))?;
                current = Some(id);
            }
            // Checked before each key: the one before may have split a page.
            let trail = trails.next().flatten().and_then(|t| t.valid(self.inner));
            apply_one(ctx, key, v, before, trail)?;
        }
        Ok(())
    }

    /// Writes the catalog's info rows of the tables this commit creates,
    /// drops, or moves the root of (see [`super::super::tables`]): the
    /// durable record of each table's root.
    fn write_info_rows(&self, ctx: &mut CommitCtx<'_, S>) -> Result<()> {
        let mut rows = Vec::new();
        for (&id, t) in ctx.touched() {
            let ddl = self.created.contains_key(&id) || self.dropped.contains_key(&id);
            let moved = t.before != t.now || t.pages != t.state.pages();
            if id >= tables::FIRST_ID && moved && !ddl {
                rows.push((
                    tables::info_key(id),
                    tables::info_value(t.now, tables::LIVE, t.pages),
                ));
            }
        }
        for &id in self
            .created
            .keys()
            .filter(|id| !self.dropped.contains_key(id))
        {
            let (root, pages) = ctx
                .touched()
                .get(&id)
                .map_or((None, 0), |t| (t.now, t.pages));
            let row = tables::info_value(root, tables::LIVE, pages);
            rows.push((tables::info_key(id), row));
        }
        for (&id, t) in &self.dropped {
            if !self.created.contains_key(&id) {
                assert!(
                    !ctx.touched().contains_key(&id),
                    "a dropped table is not written"
                );
                let row = tables::info_value(t.root(), tables::DROPPED, t.pages());
                rows.push((tables::info_key(id), row));
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut next = None;
        if self.created.keys().any(|id| !self.dropped.contains_key(id)) {
            // No id given so far is given again, after a reopen too.
            let id = self.inner.txns.tables.next_unused();
            assert!(
                self.created.keys().all(|&c| c < id),
                "created ids are given ids"
            );
            next = Some(tables::next_id_value(id));
        }
        rows.sort();
        ctx.select(&Tree::Table(Arc::clone(self.inner.txns.tables.catalog())))?;
        for (k, v) in rows {
            tree::put_along(ctx, &k, &v, None)?;
            ctx.settle();
        }
        if let Some(v) = next {
            tree::put_along(ctx, tables::NEXT_ID_KEY, &v, None)?;
            ctx.settle();
        }
        Ok(())
    }

    /// Refuses the commit when a table it writes, or drops, was dropped by
    /// a commit since it reached the table (exact: commits are serial here).
    fn check_tables_live(&self) -> Result<()> {
        for (&id, t) in &self.tables {
            if id == tables::CATALOG || self.created.contains_key(&id) || t.is_live() {
                continue;
            }
            return Err(Error::Conflict {
                key: format!("table {id}"),
                reason: "the table was dropped by a transaction that committed after this \
                         transaction reached it"
                    .into(),
            });
        }
        Ok(())
    }

    /// Makes the tables it created known, under the names `writes` give
    /// them, and those it dropped gone, as of commit `csn` (applied, not
    /// yet published).
    fn publish_tables(&self, writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>, csn: u64) {
        let registry = &self.inner.txns.tables;
        let (lo, hi) = tables::qualify_range(tables::CATALOG, &Bound::Unbounded, &Bound::Unbounded);
        for (q, v) in writes.range((lo, hi)) {
            let key = tables::split(q).1;
            let (Some(name), Some(v)) = (key.strip_prefix(tables::NAME_PREFIX), v) else {
                continue;
            };
            // Written by this transaction's DDL: a valid name and id.
            let name = std::str::from_utf8(name).expect("a name row's key is a name");
            let id = tables::decode_name_value(v, name).expect("a name row holds an id");
            let t = self.created.get(&id).cloned();
            if let Some(t) = t.or_else(|| registry.get(id).ok().flatten()) {
                t.set_name(name);
            }
        }
        for (&id, t) in &self.created {
            if !self.dropped.contains_key(&id) {
                t.mark_created(csn);
                registry.insert(Arc::clone(t));
            }
        }
        for (&id, t) in &self.dropped {
            if !self.created.contains_key(&id) {
                registry.mark_dropped(t, csn);
            }
        }
    }

    /// Fails with [`Error::Conflict`] when a commit since the snapshot
    /// changed what this transaction depends on. Under Serializable that is
    /// a key or a range it read from its snapshot (also when it locked the
    /// key later: the snapshot read saw the older value); a blind write
    /// needs no check: it takes effect at the commit point, which is where
    /// the transaction serializes. Under Snapshot nothing is looked up: each
    /// key it writes or read under its lock was checked unchanged when it
    /// took the lock ([`check_locked_unchanged`](Self::check_locked_unchanged)),
    /// and the lock kept it so (a debug build checks again). Called in the
    /// commit section, where no commit runs beside it (or, for a
    /// transaction that writes nothing, anywhere: the store's lock makes
    /// the look-up one moment).
    fn validate(&self, writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Result<()> {
        let set = self.read_set()?;
        if self.opts.isolation == Isolation::Snapshot {
            assert!(set.keys.is_empty(), "only Serializable records its reads");
            assert!(set.ranges.is_empty(), "only Serializable records its reads");
            self.debug_check_locked_unchanged(writes);
            return Ok(());
        }
        if set.keys.is_empty() && set.ranges.is_empty() {
            // Nothing it depends on was read from the snapshot: it needs no
            // look-up, and no refusal when the snapshot was given up.
            return Ok(());
        }
        let snap = self.snap();
        let keys = set.keys.iter().map(Vec::as_slice);
        let found = snap.store().changed_since(snap.csn(), keys, &set.ranges)?;
        match found {
            None => Ok(()),
            Some((key, what)) => Err(Error::Conflict {
                key: tables::shown(&key),
                reason: format!(
                    "Serializable refuses a commit when another transaction committed a \
                     change, after this transaction's snapshot, to {what} from that snapshot"
                ),
            }),
        }
    }

    /// In a debug build, under Snapshot: every key written or read under
    /// its lock is still unchanged since the snapshot (its check when the
    /// lock was taken, and the lock since, hold). A snapshot given up since
    /// cannot say, and needs not: the check was made while it was live.
    fn debug_check_locked_unchanged(&self, writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        if !cfg!(debug_assertions) {
            return;
        }
        let snap = self.snap();
        let keys = writes.keys().chain(self.for_update.keys());
        let found = snap
            .store()
            .changed_since(snap.csn(), keys.map(Vec::as_slice), &[]);
        if let Ok(Some((key, _))) = found {
            panic!(
                "{:?} changed since the snapshot under this transaction's row lock",
                tables::shown(&key)
            );
        }
    }
}

/// Applies one write, whose key held `before` (staged already), from
/// `trail` when given, and ends the structure change it needed, if any.
fn apply_one<S: Storage>(
    ctx: &mut CommitCtx<'_, S>,
    k: &[u8],
    v: &Option<Vec<u8>>,
    before: &Option<Vec<u8>>,
    trail: Option<tree::Trail>,
) -> Result<()> {
    if cfg!(debug_assertions) {
        // The tree hands back the value it replaces (copying it, and
        // reading an overflow chain: too dear for release builds).
        let old = match v {
            Some(v) => tree::replace_along(ctx, k, v, trail)?,
            None => tree::remove_along(ctx, k, trail)?,
        };
        assert_eq!(
            &old, before,
            "the row lock kept the key at its before-image"
        );
    } else {
        match v {
            Some(v) => tree::put_along(ctx, k, v, trail)?,
            None => drop(tree::delete_along(ctx, k, trail)?),
        }
    }
    ctx.settle();
    Ok(())
}
