//! The random crash campaign on the simulated disk (RELIABILITY.md C3): seeds
//! with random knobs, power failures at random operations, torn and dropped
//! unsynced writes, crashes during recovery, write transactions of several
//! logical threads interleaved (Serializable ones' reads checked against the
//! state at their commit), compactions cut short or run to their end between
//! commits on a third of the seeds; every recovery is checked against the
//! model of acknowledged commits and the data file's length against the
//! page count. `DIRECTKV_SIM_SEEDS` sets the number of
//! seeds (default 300; CI runs more). A failure prints its replay line.

#[test]
fn random_crash_seeds_hold_the_invariants() {
    let seeds: u64 = std::env::var("DIRECTKV_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut failures = Vec::new();
    let (mut acked, mut overlapped, mut refused) = (0, 0, 0);
    let (mut compactions, mut moved, mut ended) = (0, 0, 0);
    for seed in 0..seeds {
        match super::run_seed(seed) {
            Ok(r) => {
                acked += r.acked;
                overlapped += r.overlapped;
                refused += r.refused;
                compactions += r.compactions;
                moved += r.compacted_pages;
                ended += r.compactions_ended;
            }
            Err(f) => failures.push(f.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(acked > seeds, "the campaign committed work: {acked}");
    // Logical threads interleave: commits happen beside open transactions,
    // and some are refused as conflicts (nothing applied, checked above).
    assert!(overlapped > 0 && refused > 0, "{overlapped} {refused}");
    // Compactions ran, moved pages and ended, with power failures around.
    assert!(
        moved > 0 && ended > 0,
        "{compactions} compactions, {moved} pages moved, {ended} ended"
    );
    eprintln!(
        "{acked} commits, {overlapped} beside an open one, {refused} refused; \
         {compactions} compaction calls moved {moved} pages, {ended} compactions ended"
    );
}

/// Exhaustive crash points (RELIABILITY.md C4): canonical workloads crashed
/// after every mutating I/O operation, database creation included, each with
/// several different subsets of unsynced writes torn or dropped. The four
/// seeds pick workloads whose knobs cover small and large pages, frequent
/// checkpoints and WAL segment rollover.
#[test]
fn every_crash_point_of_canonical_workloads_recovers() {
    let tears: u64 = std::env::var("DIRECTKV_SIM_TEARS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut recoveries = 0;
    for seed in [1u64, 2, 3, 4] {
        match super::sweep_crash_points(seed, 30, tears) {
            Ok(n) => recoveries += n,
            Err(f) => panic!("{f}"),
        }
    }
    assert!(recoveries > 100, "{recoveries} recoveries checked");
    eprintln!("{recoveries} crash-point recoveries checked");
}

/// The I/O-error countdown (C5): every write, sync and allocation of a
/// workload failed in turn, transiently and persistently; recovery afterwards
/// keeps every acknowledged commit, and nothing panics.
#[test]
fn every_io_error_is_survived() {
    let mut runs = 0;
    for seed in [11u64, 12] {
        runs += super::sweep_io_errors(seed, 20).unwrap_or_else(|f| panic!("{f}"));
    }
    assert!(runs > 100, "{runs} runs");
    eprintln!("{runs} I/O-error runs checked");
}

/// fsync-EIO the Linux way (C6): a failed sync drops the unsynced writes and
/// would let the next sync succeed; no commit after it is acknowledged, and
/// none before it is lost.
#[test]
fn a_failed_fsync_is_never_retried_into_a_lie() {
    let mut runs = 0;
    for seed in 21u64..29 {
        runs += super::sweep_fsync_eio(seed, 20).unwrap_or_else(|f| panic!("{f}"));
    }
    assert!(runs > 100, "{runs} runs");
    eprintln!("{runs} fsync-EIO runs checked");
}

/// Corruption injection (C7): bit flips in the data file and the WAL, and
/// misdirected page writes, on a closed database. Every read returns the
/// right bytes or a typed `Corruption`; damage to a synced WAL record before
/// later flushes makes open refuse (F6) rather than truncate.
#[test]
fn corruption_is_detected_never_returned() {
    let mut detected = 0;
    for seed in 31u64..35 {
        detected += super::sweep_corruption(seed, 150).unwrap_or_else(|f| panic!("{f}"));
    }
    assert!(detected > 0, "some damage hit live data and was reported");
    eprintln!("{detected} of 600 damaged databases reported Corruption");
}

/// Regression (simulated crash campaign): segment recycling renamed a segment
/// before rewriting its header, and a crash in between left a file whose name
/// and header disagreed; recovery refused the log. These are the seeds that
/// found it (they recycle segments and crash around it), run as they were
/// found: without compaction.
#[test]
fn regression_recycled_segment_name_and_header_agree() {
    for seed in [47u64, 62, 157, 174, 191, 257, 288] {
        if let Err(f) = super::run_seed_with(seed, false) {
            panic!("{f}");
        }
    }
}
