//! `directkv wal dump`: print the records of a write-ahead log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use directkv::internals::io::OsStorage;
use directkv::internals::wal::records::{decode, kind_name, Decoded};
use directkv::internals::wal::{Record, WalReader};
use directkv::Lsn;

/// `directkv wal …`
#[derive(clap::Subcommand)]
pub enum Command {
    /// Print every record (LSN, kind, length, CRC status) and a summary.
    Dump(DumpArgs),
}

/// Options of `directkv wal dump`.
#[derive(clap::Args)]
pub struct DumpArgs {
    /// The database directory (its `wal/` is read) or a WAL directory.
    dir: PathBuf,
    /// Start at this LSN (`0/1A2B3C`, `0x1A2B3C` or decimal): a record's start
    /// or end as the dump prints them, or the log's end. Default: the oldest
    /// segment's first record.
    #[arg(long, value_parser = parse_lsn)]
    from: Option<Lsn>,
    /// Print only the summary.
    #[arg(long)]
    summary: bool,
    /// Print records and summary as JSON lines.
    #[arg(long)]
    json: bool,
    /// Also print each payload's first bytes in hex.
    #[arg(long)]
    payload: bool,
}

/// Parses `HI/LO` (hex, as printed), `0x…` hex, or decimal.
pub fn parse_lsn(text: &str) -> Result<Lsn, String> {
    let bad = || format!("{text:?} is not an LSN (try 0/1A2B3C, 0x1A2B3C or 1715004)");
    if let Some((hi, lo)) = text.split_once('/') {
        let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
        if hi > u64::from(u32::MAX) || lo > u64::from(u32::MAX) {
            return Err(bad());
        }
        return Ok(Lsn::new(hi << 32 | lo));
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16)
            .map(Lsn::new)
            .map_err(|_| bad());
    }
    text.parse().map(Lsn::new).map_err(|_| bad())
}

fn wal_dir(dir: &Path) -> PathBuf {
    let inner = dir.join("wal");
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

/// Fails unless `from` is where a record of the log read by `reader` (from
/// its oldest record) starts or ends, or the log's end: the reader reads
/// from any position as if a record started there, so anywhere else it
/// would call the log corrupt or stop at once. Where the log is corrupt
/// before `from`, the dump itself reports it.
fn check_from(mut reader: WalReader<OsStorage>, from: Lsn) -> Result<()> {
    let first = reader.position();
    if from < first {
        bail!("LSN {from} is before the log's oldest record at {first}");
    }
    let mut last_end = first;
    loop {
        let rec = match reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            // Every record boundary up to the damage was matched above: a
            // start past it cannot be shown to be one, and the dump from
            // there would not meet the damage to report it.
            Err(e) => {
                bail!("LSN {from} is past {last_end}, where the log stops being readable: {e}")
            }
        };
        if rec.lsn == from || rec.end() == from {
            return Ok(());
        }
        if from < rec.end() {
            let at = if from > rec.lsn { rec.lsn } else { last_end };
            bail!(
                "LSN {from} is not a record boundary: records start at {at} and {}; \
                 give a record's LSN as `wal dump` prints it",
                if from > rec.lsn { rec.end() } else { rec.lsn }
            );
        }
        last_end = rec.end();
    }
    let end = reader.tail().map_or(last_end, |t| t.end);
    if from > end {
        bail!("LSN {from} is past the end of the log at {end}");
    }
    Ok(())
}

/// What an engine record says, in a few words: its transaction and page,
/// or the roots it leaves (the default keyspace's, and the catalog of named
/// tables' where there is one) and the free pages it counts; empty for
/// other kinds.
fn detail(rec: &Record) -> String {
    // (root, page count, free-list head, free pages, catalog root)
    let roots = |m: &directkv::internals::wal::records::Meta| {
        let catalog = match m.catalog.get() {
            0 => String::new(),
            c => format!(" catalog {c}"),
        };
        let counted = m
            .free_pages
            .map_or(String::new(), |n| format!(" ({n} free)"));
        let compacting = m.compaction.map_or(String::new(), |c| {
            format!(" compacting to {} (epoch {})", c.boundary, c.epoch)
        });
        format!(
            "root {} pages {} free {}{counted}{catalog}{compacting}",
            m.root.get(),
            m.page_count,
            m.freelist.get()
        )
    };
    match decode(rec.kind, &rec.payload, rec.lsn) {
        None => String::new(),
        Some(Err(e)) => format!("undecodable: {e}"),
        Some(Ok(Decoded::Page(p))) => format!(
            "txn {} page {}{}",
            p.txn.get(),
            p.page.get(),
            if p.full { " full" } else { "" }
        ),
        Some(Ok(Decoded::Commit { txn, meta: m })) => format!("txn {} {}", txn.get(), roots(&m)),
        Some(Ok(Decoded::Checkpoint { redo, meta: m })) => format!("redo {redo} {}", roots(&m)),
        Some(Ok(Decoded::Abort { txn })) => format!("txn {}", txn.get()),
    }
}

/// Prints one record as a JSON line or a text line.
fn print_record(rec: &Record, name: &str, args: &DumpArgs) {
    let detail = detail(rec);
    let head: String = rec
        .payload
        .iter()
        .take(32)
        .map(|b| format!("{b:02x}"))
        .collect();
    if args.json {
        let mut line = serde_json::json!({
            "lsn": rec.lsn.get(), "lsn_text": rec.lsn.to_string(), "end": rec.end().get(),
            "kind": name, "kind_code": rec.kind, "length": rec.payload.len(), "crc": "ok",
            "detail": detail,
        });
        if args.payload {
            line["payload_head"] = serde_json::Value::String(head);
        }
        println!("{line}");
    } else if args.payload {
        println!(
            "{:>18}  {:<14} len {:>8}  crc ok  {detail}  {head}",
            rec.lsn.to_string(),
            name,
            rec.payload.len()
        );
    } else {
        println!(
            "{:>18}  {:<14} len {:>8}  crc ok  {detail}",
            rec.lsn.to_string(),
            name,
            rec.payload.len()
        );
    }
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Dump(args) => dump(args),
    }
}

fn dump(args: DumpArgs) -> Result<()> {
    let dir = wal_dir(&args.dir);
    let Some(oldest) = WalReader::open_oldest(OsStorage::default(), &dir)
        .with_context(|| format!("reading {}", dir.display()))?
    else {
        bail!("{} holds no WAL segments", dir.display());
    };
    let mut reader = match args.from {
        Some(from) => {
            let (seg, db_id) = (oldest.segment_bytes(), oldest.db_id());
            check_from(oldest, from)?;
            WalReader::new(OsStorage::default(), &dir, seg, db_id, from)
        }
        None => oldest,
    };
    let mut by_kind: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut first: Option<Lsn> = None;
    let mut last_end = reader.position();
    let outcome = loop {
        let rec = match reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        first.get_or_insert(rec.lsn);
        last_end = rec.end();
        let name = kind_name(rec.kind);
        let e = by_kind.entry(name.clone()).or_default();
        e.0 += 1;
        e.1 += rec.payload.len() as u64;
        if args.summary {
            continue;
        }
        print_record(&rec, &name, &args);
    };
    let (end_text, status) = match (&outcome, reader.tail()) {
        (Err(e), _) => (format!("{last_end}"), format!("CORRUPT: {e}")),
        (Ok(()), Some(t)) if t.torn => (
            t.end.to_string(),
            "ends at a torn (invalid) record: the last write was interrupted".to_string(),
        ),
        (Ok(()), Some(t)) => (t.end.to_string(), "clean end".to_string()),
        (Ok(()), None) => (last_end.to_string(), "clean end".to_string()),
    };
    let summary = Summary {
        dir: &dir,
        first,
        end: &end_text,
        status: &status,
        by_kind: &by_kind,
    };
    summary.print(args.json);
    outcome.context("the log is corrupt")
}

/// What `wal dump` found: the first record, where the log ends and how,
/// and the records and payload bytes of each kind.
struct Summary<'a> {
    dir: &'a std::path::Path,
    first: Option<Lsn>,
    end: &'a str,
    status: &'a str,
    by_kind: &'a BTreeMap<String, (u64, u64)>,
}

impl Summary<'_> {
    /// Prints it as one JSON document, or as text.
    fn print(&self, json: bool) {
        let (dir, first, end_text, status) = (self.dir, self.first, self.end, self.status);
        if json {
            let kinds: serde_json::Map<_, _> = self
                .by_kind
                .iter()
                .map(|(k, (n, b))| {
                    (
                        k.clone(),
                        serde_json::json!({"records": n, "payload_bytes": b}),
                    )
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "summary": true, "dir": dir.to_string_lossy(), "first": first.map(|l| l.get()),
                    "end": end_text, "status": status, "kinds": kinds,
                })
            );
            return;
        }
        println!("-- {}", dir.display());
        if let Some(f) = first {
            println!("   first record {f}, log end {end_text}: {status}");
        } else {
            println!("   no records; log end {end_text}: {status}");
        }
        for (k, (n, b)) in self.by_kind {
            println!("   {k:<14} {n:>10} records {b:>14} payload bytes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_lsn;
    use directkv::Lsn;

    #[test]
    fn lsn_forms() {
        assert_eq!(parse_lsn("1/00000010"), Ok(Lsn::new((1 << 32) + 16)));
        assert_eq!(parse_lsn("0x10"), Ok(Lsn::new(16)));
        assert_eq!(parse_lsn("16"), Ok(Lsn::new(16)));
        assert_eq!(
            parse_lsn(&Lsn::new(123_456_789_012).to_string()),
            Ok(Lsn::new(123_456_789_012))
        );
        assert!(parse_lsn("zz").is_err());
    }
}
