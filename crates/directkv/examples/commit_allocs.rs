//! Heap allocations per durable commit of one 100-byte put into a fresh
//! database, counted by a global allocator that counts, then where 200
//! more commits allocate (the first three engine frames of each
//! allocation's stack, per commit):
//!
//! `CARGO_PROFILE_RELEASE_DEBUG=1 cargo run --release -p directkv --example commit_allocs -- DIR [COMMITS]`
//!
//! DIR must not hold a database. The counts do not depend on the machine's
//! speed, so they compare across runs and commits.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

thread_local! {
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static SITES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn note_site() {
    if !TRACE.load(Ordering::Relaxed) || INSIDE.with(|i| i.replace(true)) {
        return;
    }
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = bt
        .lines()
        .filter(|l| l.contains(": ") && !l.contains("commit_allocs::") && !l.contains(" at "))
        .map(|l| l.split(": ").nth(1).unwrap_or(""))
        .filter(|f| f.starts_with("directkv::"))
        .take(3)
        .collect();
    SITES.lock().expect("sites").push(frames.join(" <- "));
    INSIDE.with(|i| i.set(false));
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        note_site();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() -> directkv::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let db = directkv::Database::open(&dir, directkv::Options::default())?;
    let mut key = 0u64;
    let mut one = |db: &directkv::Database| -> directkv::Result<()> {
        key = key
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut t = db.begin_write()?;
        t.put(&key.to_le_bytes(), &[7u8; 100])?;
        t.commit()
    };
    for _ in 0..1000 {
        one(&db)?;
    }
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    for _ in 0..n {
        one(&db)?;
    }
    let (a1, b1) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    TRACE.store(true, Ordering::Relaxed);
    for _ in 0..200 {
        one(&db)?;
    }
    TRACE.store(false, Ordering::Relaxed);
    let mut counts = std::collections::BTreeMap::new();
    for s in SITES.lock().expect("sites").iter() {
        *counts.entry(s.clone()).or_insert(0u64) += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    for (site, c) in v.iter().take(40) {
        println!("{:6.2} {site}", *c as f64 / 200.0);
    }
    println!(
        "{:.1} allocations and {:.0} bytes allocated per commit ({n} commits)",
        (a1 - a0) as f64 / n as f64,
        (b1 - b0) as f64 / n as f64
    );
    db.close()
}
