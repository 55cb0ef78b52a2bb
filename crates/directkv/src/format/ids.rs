//! Identities that on-disk structures carry.

/// A database's identity: 16 random bytes chosen at creation, carried by
/// every page, every WAL segment header and `CONTROL`, so a page or a
/// segment of another database is recognised as foreign.
pub type DbId = [u8; 16];
