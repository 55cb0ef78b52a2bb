//! Arbitrary page images: verification and structural validation never panic,
//! and a random image is never accepted as a page.
#![no_main]
use directkv::internals::btree::node;
use directkv::internals::format::{data_head, page, PageId};
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
    // Also as a sealed page, so validation sees content past the checksum.
    p[8] = if data.first().is_some_and(|b| b & 1 == 0) { 1 } else { 2 };
    p[9] = 0;
    page::seal_in_place(&mut p, PageId::new(1), &[0; 16]);
    if page::verify(&p, PageId::new(1), &[0; 16]).is_ok() {
        let _ = node::validate(&p);
    }
});
