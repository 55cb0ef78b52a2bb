//! Random identifiers: a database's id, an archive's, a backup's.

/// A new database id: 16 random bytes (time and pid when the kernel has
/// no randomness to give).
pub(crate) fn random_id() -> crate::format::DbId {
    let mut id = [0u8; 16];
    // SAFETY: `id` is a writable buffer of 16 bytes for the call.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    if n != 16 {
        // Fall back to time and pid: unique enough to tell databases apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        id.copy_from_slice(&(t ^ (u128::from(std::process::id()) << 64)).to_le_bytes());
    }
    id
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_ids_differ() {
        assert_ne!(super::random_id(), super::random_id());
    }
}
