//! `directkv sim` end to end: a short campaign passes and reports its summary.

#[test]
fn a_short_campaign_passes_and_reports() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["sim", "--seeds", "20", "--from", "1000", "--json"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["seeds"], 20);
    assert_eq!(v["failures"], 0);
    assert!(v["crashes"].as_u64().expect("crashes") >= 20);
    assert!(v["seeds_per_sec"].as_f64().expect("rate") > 0.0);
}

/// A seed range past the last seed is refused: wrapped, it would run no
/// seed and report a pass.
#[test]
fn a_seed_range_past_the_last_seed_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["sim", "--from", &u64::MAX.to_string(), "--seeds", "1"])
        .output()
        .expect("run");
    assert!(!out.status.success(), "a pass of no seed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run past the last seed"), "{err}");
}
