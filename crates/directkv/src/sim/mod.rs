//! Deterministic simulation: a disk that loses, tears and reorders unsynced
//! writes on purpose, and seeded crash campaigns against the whole engine.

mod damage;
mod disk;
mod rng;
mod run;

pub use disk::SimStorage;
pub use rng::Rng;
pub use run::{run_seed, sweep_corruption};
#[cfg(test)]
use run::{run_seed_with, sweep_crash_points, sweep_fsync_eio, sweep_io_errors};

#[cfg(test)]
mod tests;
