//! Operation sequences on the simulated disk with power failures and crashes:
//! the input picks the seed of a whole campaign run (workload, knobs, crash
//! points, torn writes), and every recovery is checked against the model.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut seed = [0u8; 8];
    let n = data.len().min(8);
    seed[..n].copy_from_slice(&data[..n]);
    if let Err(f) = directkv::internals::sim::run_seed(u64::from_le_bytes(seed)) {
        panic!("{f}");
    }
});
