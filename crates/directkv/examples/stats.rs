//! Read what the engine reports about itself: the cache, the log, the I/O
//! path, and where foreground time went, by cause.
//!
//! `cargo run -p directkv --example stats [DIR]`

use directkv::{Database, Options};

fn main() -> directkv::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "directkv-example-stats".into());
    let db = Database::open(&dir, Options::default())?;
    for i in 0..200u32 {
        let mut w = db.begin_write()?;
        w.put(format!("key/{i:04}").as_bytes(), &[7u8; 100])?;
        w.commit()?;
    }
    let s = db.stats();
    println!("data file I/O: {:?}, WAL sync: {:?}", s.data_io, s.wal_sync);
    println!("torn-page protection: {}", s.torn_page_protection);
    println!(
        "commits {}, cache hits {}, misses {}, dirty pages {}",
        s.commits, s.cache_hits, s.cache_misses, s.dirty_pages
    );
    println!(
        "WAL bytes {}, full-page images {}, checkpoints {}",
        s.wal_bytes, s.full_page_images, s.checkpoints
    );
    let sync = &s.stalls.histograms.wal_sync_wait;
    println!(
        "WAL sync waits: {} totalling {} us ({} over 1 ms)",
        sync.waits, sync.waited_us, sync.count
    );
    println!(
        "recovery at open: {} transactions from {} WAL bytes in {} us",
        s.recovery.transactions, s.recovery.wal_bytes, s.recovery.micros
    );
    println!("JSON: {}", serde_json::to_string(&s).unwrap_or_default());
    db.close()
}
