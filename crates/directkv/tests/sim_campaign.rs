//! The random crash campaign on the simulated disk (RELIABILITY.md C3): seeds
//! with random knobs, power failures at random operations, torn and dropped
//! unsynced writes, crashes during recovery; every recovery is checked against
//! the model of acknowledged commits. `DIRECTKV_SIM_SEEDS` sets the number of
//! seeds (default 300; CI runs more). A failure prints its replay line.

#[test]
fn random_crash_seeds_hold_the_invariants() {
    let seeds: u64 = std::env::var("DIRECTKV_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut failures = Vec::new();
    let mut acked = 0;
    for seed in 0..seeds {
        match directkv::sim::run_seed(seed) {
            Ok(r) => acked += r.acked,
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
}
