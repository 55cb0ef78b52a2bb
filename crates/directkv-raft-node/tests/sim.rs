//! The deterministic simulation of a whole cluster in one process
//! (`directkv_raft_node::sim`): a seed reproduces its run exactly (the
//! same history, faults and final states), another seed gives another
//! run, and random seeds with faults (partitions, crashes and restarts,
//! lost, delayed and duplicated messages) give histories the
//! linearizability checker accepts and replicas that agree once healed.

use std::time::Instant;

use directkv_raft_node::lincheck::Verdict;
use directkv_raft_node::sim::{self, SimOptions, SimRun};

fn run(opts: &SimOptions) -> SimRun {
    let dir = tempfile::tempdir().expect("a temporary directory");
    match sim::run(opts, dir.path()) {
        Ok(r) => r,
        Err(e) => panic!(
            "seed {}: the simulation failed: {e:?}\n{}",
            opts.seed,
            rerun(opts.seed)
        ),
    }
}

/// How to run seed `seed` of the campaign again.
fn rerun(seed: u64) -> String {
    format!(
        "rerun: DIRECTKV_RAFT_SIM_SEED={seed} cargo test -p directkv-raft-node --test sim \
         random_seeds -- --nocapture"
    )
}

/// An environment variable's number, or `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// The options of campaign seed `seed`: five nodes for one seed in three.
fn campaign_options(seed: u64) -> SimOptions {
    SimOptions {
        nodes: if seed % 3 == 0 { 5 } else { 3 },
        ..SimOptions::new(seed)
    }
}

#[test]
fn a_seed_reproduces_its_run_exactly() {
    assert!(
        sim::deterministic(),
        "built without --cfg tokio_unstable (.cargo/config.toml): the runtime's choices are not seeded"
    );
    // Five nodes for seeds 42 and 45, three for the others.
    for seed in 41..47 {
        let opts = campaign_options(seed);
        let (a, b) = (run(&opts), run(&opts));
        assert!(!a.events.is_empty(), "seed {seed}: the nemesis acted");
        assert_eq!(a.history, b.history, "seed {seed}: the same history");
        assert_eq!(a.events, b.events, "seed {seed}: the same faults");
        assert_eq!(a.finals, b.finals, "seed {seed}: the same final states");
        assert_eq!(a.simulated_ms, b.simulated_ms, "seed {seed}");
    }
    let (a, c) = (run(&campaign_options(41)), run(&campaign_options(47)));
    assert_ne!(a.history, c.history, "another seed, another history");
}

#[test]
fn random_seeds_are_linearizable_and_agree() {
    let first = env_u64("DIRECTKV_RAFT_SIM_SEED", 0);
    let seeds = env_u64(
        "DIRECTKV_RAFT_SIM_SEEDS",
        if std::env::var("DIRECTKV_RAFT_SIM_SEED").is_ok() {
            1
        } else {
            500
        },
    );
    let started = Instant::now();
    let (mut ops, mut unknown, mut faults) = (0, 0, 0);
    for seed in first..first + seeds {
        let r = run(&campaign_options(seed));
        let rerun = rerun(seed);
        match &r.report.verdict {
            Verdict::Linearizable => {}
            v => panic!("seed {seed}: {v:?}\nfaults: {:#?}\n{rerun}", r.events),
        }
        assert!(
            r.converged,
            "seed {seed}: the replicas disagree after healing: {:?}\nfaults: {:#?}\n{rerun}",
            r.finals, r.events
        );
        ops += r.history.len();
        unknown += r.history.iter().filter(|h| !h.is_known()).count();
        faults += r.events.len();
    }
    eprintln!(
        "{seeds} seeds from {first}: {ops} operations ({unknown} of unknown outcome), \
         {faults} faults, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
