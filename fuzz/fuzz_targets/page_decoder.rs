//! Arbitrary page images: verification and structural validation never panic,
//! a random image is never accepted as a page, and a free page validates
//! only with a link a file can hold.
#![no_main]
use directkv::internals::pages::node;
use directkv::internals::pages::PAGE_COUNT_MAX;
use directkv::internals::pages::{data_head, page, PageId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut p = vec![0u8; 4096];
    let n = data.len().min(4096);
    p[..n].copy_from_slice(&data[..n]);
    let _ = page::verify(&p, PageId::new(1), &[0; 16]);
    let _ = node::validate(&p);
    // Page 0 of the data file is its head, decoded by its own codec.
    if let Some(head) = data_head::decode(&p) {
        let mut again = p.clone();
        data_head::encode(&mut again, head);
        assert_eq!(data_head::decode(&again), Some(head));
    }
    // Also as a sealed page, so validation sees content past the checksum:
    // a leaf, a branch or a free page (whose link must name a page a file
    // can hold).
    p[8] = match data.first().map_or(0, |b| b % 3) {
        0 => 1,
        1 => 2,
        _ => 4,
    };
    p[9] = 0;
    page::seal_in_place(&mut p, PageId::new(1), &[0; 16]);
    if page::verify(&p, PageId::new(1), &[0; 16]).is_ok() && node::validate(&p).is_ok() && p[8] == 4 {
        let next = u64::from_le_bytes(p[48..56].try_into().expect("8 bytes"));
        assert!(next < PAGE_COUNT_MAX, "a free link past any file is refused");
    }
});
