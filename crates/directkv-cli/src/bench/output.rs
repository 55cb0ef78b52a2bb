//! The one writer of bench results: every bench's rows go out through it,
//! as JSON lines (`--json`) or as a table on the terminal.
//!
//! - Every JSON line carries `schema` ([`SCHEMA`]) and `kind`; a row's
//!   line also names its bench (`workload`), `config` and `round`, its memory
//!   budget, and `error` (null, or why the run failed, with the bench's own
//!   figures then zeros).
//! - Table rows are printed as they arrive, in the columns the row type names.

use anyhow::Result;
use serde::Serialize;

/// The version of the JSON; bumped when a field changes meaning or goes.
pub const SCHEMA: &str = "directkv-bench/2";

/// Width of the `config` column of every table.
const CONFIG_WIDTH: usize = 22;

/// One row as printed: what the driver knows of every run, then the bench's
/// own figures.
#[derive(Debug, Clone, Serialize)]
pub struct Line<R> {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// `"run"`.
    pub kind: &'static str,
    /// The bench (`tpcb`, `ycsb-a-zipfian`, `wal`, `memory`, …).
    pub workload: String,
    /// Configuration name (`direct`, `buffered`, a sync method, `rocksdb`, …).
    pub config: String,
    /// Round number (configurations alternate within a round).
    pub round: u32,
    /// The memory cgroup limit the run had, if any.
    pub memory_limit_bytes: Option<u64>,
    /// Peak of the memory cgroup (process and page cache), if in one.
    pub cgroup_peak_bytes: Option<u64>,
    /// The bench's own figures.
    #[serde(flatten)]
    pub row: R,
    /// Why the run failed, if it did (then the figures are zeros).
    pub error: Option<String>,
}

/// A table column: its title and width.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// Title in the header line.
    pub title: &'static str,
    /// Width the cells are right-aligned to (0: as wide as the cell).
    pub width: usize,
}

/// Shorthand for a [`Column`].
pub const fn col(title: &'static str, width: usize) -> Column {
    Column { title, width }
}

/// A row a bench reports: its table columns after `config` and `rnd`.
pub trait TableRow {
    /// The columns, in order.
    const COLUMNS: &'static [Column];
    /// One cell per column, formatted.
    fn cells(&self) -> Vec<String>;
}

/// Prints lines as JSON or as a table.
#[derive(Debug, Clone, Copy)]
pub struct Writer {
    json: bool,
}

impl Writer {
    /// A writer of JSON lines (`json`) or tables.
    pub fn new(json: bool) -> Writer {
        Writer { json }
    }

    /// Whether this writer prints JSON.
    pub fn json(&self) -> bool {
        self.json
    }

    /// The table's header line (nothing in JSON).
    pub fn header<R: TableRow>(&self) {
        if self.json {
            return;
        }
        let titles = R::COLUMNS.iter().map(|c| (c.title.to_string(), c.width));
        println!("{}", Self::format("config", "rnd", titles));
    }

    /// One line: JSON, or a table row (`FAILED: why` for a failed run).
    pub fn line<R: Serialize + TableRow>(&self, line: &Line<R>) -> Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(line)?);
            return Ok(());
        }
        let round = line.round.to_string();
        if let Some(e) = &line.error {
            println!("{:<CONFIG_WIDTH$} {round:>3} FAILED: {e}", line.config);
            return Ok(());
        }
        let cells = line.row.cells();
        assert_eq!(cells.len(), R::COLUMNS.len(), "one cell per column");
        let cells = cells.into_iter().zip(R::COLUMNS.iter().map(|c| c.width));
        println!("{}", Self::format(&line.config, &round, cells));
        Ok(())
    }

    /// A JSON line other than a row (a summary); nothing in a table.
    pub fn json_line<T: Serialize>(&self, value: &T) -> Result<()> {
        if self.json {
            println!("{}", serde_json::to_string(value)?);
        }
        Ok(())
    }

    fn format(config: &str, round: &str, cells: impl Iterator<Item = (String, usize)>) -> String {
        let mut text = format!("{config:<CONFIG_WIDTH$} {round:>3}");
        for (cell, width) in cells {
            text.push(' ');
            text.push_str(&format!("{cell:>width$}"));
        }
        text
    }
}

/// Mebibytes, as a table cell.
pub fn mib(bytes: u64) -> String {
    format!("{:.0}M", bytes as f64 / f64::from(1 << 20))
}

/// Microseconds as milliseconds, as a table cell.
pub fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0}ms", us as f64 / 1000.0)
    } else {
        format!("{:.2}ms", us as f64 / 1000.0)
    }
}
