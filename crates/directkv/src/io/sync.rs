//! How a file's writes become durable.
//!
//! | method          | open flags | per write     | `sync()`     |
//! |-----------------|------------|---------------|--------------|
//! | `fsync`         | —          | —             | `fsync`      |
//! | `fdatasync`     | —          | —             | `fdatasync`  |
//! | `open_sync`     | `O_SYNC`   | —             | nothing      |
//! | `open_datasync` | `O_DSYNC`  | —             | nothing      |
//! | `pwrite_dsync`  | —          | `RWF_DSYNC`   | nothing      |
//! | `none`          | —          | —             | nothing: **not durable** |
//!
//! Each combines with direct I/O (`O_DIRECT`). Direct I/O alone is not durability:
//! the device may hold the data in a volatile cache, so every durable method ends
//! in a flush (fsync, fdatasync) or a FUA/flush-backed write (O_SYNC, O_DSYNC,
//! RWF_DSYNC). See DESIGN.md invariant 2.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The system call or flag that makes writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMethod {
    /// `fsync(2)` after writing: data and all metadata.
    Fsync,
    /// `fdatasync(2)` after writing: data and the metadata needed to read it.
    Fdatasync,
    /// The file is opened `O_SYNC`: every write returns when data and metadata are durable.
    OpenSync,
    /// The file is opened `O_DSYNC`: every write returns when its data is durable.
    OpenDatasync,
    /// Each write is a `pwritev2(RWF_DSYNC)`: `O_DSYNC` for that write only.
    PwriteDsync,
    /// Nothing is synced. **Not durable**: for tests and bulk loads only.
    None,
}

impl SyncMethod {
    /// Every method, durable ones first, in the order `test-fsync` reports them.
    pub const ALL: [SyncMethod; 6] = [
        SyncMethod::OpenDatasync,
        SyncMethod::Fdatasync,
        SyncMethod::Fsync,
        SyncMethod::OpenSync,
        SyncMethod::PwriteDsync,
        SyncMethod::None,
    ];

    /// The durable methods.
    pub const DURABLE: [SyncMethod; 5] = [
        SyncMethod::OpenDatasync,
        SyncMethod::Fdatasync,
        SyncMethod::Fsync,
        SyncMethod::OpenSync,
        SyncMethod::PwriteDsync,
    ];

    /// Whether a completed write plus [`sync`](super::DirectFile::sync) is durable.
    pub fn is_durable(self) -> bool {
        self != SyncMethod::None
    }

    /// Flags this method adds to `open(2)`.
    pub fn open_flags(self) -> libc::c_int {
        let flags = match self {
            SyncMethod::OpenSync => libc::O_SYNC,
            SyncMethod::OpenDatasync => libc::O_DSYNC,
            _ => 0,
        };
        // Only methods that sync each write change how the file is opened, and
        // each of those is durable.
        assert!(flags == 0 || (self.syncs_each_write() && self.is_durable()));
        assert_eq!(
            flags & libc::O_DSYNC != 0,
            self == SyncMethod::OpenSync || self == SyncMethod::OpenDatasync
        );
        flags
    }

    /// Whether each write is durable by itself, so `sync()` has nothing to do.
    pub fn syncs_each_write(self) -> bool {
        let each = matches!(
            self,
            SyncMethod::OpenSync | SyncMethod::OpenDatasync | SyncMethod::PwriteDsync
        );
        assert!(
            !each || self.is_durable(),
            "a method that syncs each write is durable"
        );
        each
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SyncMethod::Fsync => "fsync",
            SyncMethod::Fdatasync => "fdatasync",
            SyncMethod::OpenSync => "open_sync",
            SyncMethod::OpenDatasync => "open_datasync",
            SyncMethod::PwriteDsync => "pwrite_dsync",
            SyncMethod::None => "none",
        }
    }
}

impl fmt::Display for SyncMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SyncMethod {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let found = SyncMethod::ALL.into_iter().find(|m| m.name() == s);
        found.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown sync method {s:?}; expected one of fsync, fdatasync, open_sync, \
                     open_datasync, pwrite_dsync, none"
            ))
        })
    }
}

/// A sync method together with whether writes bypass the page cache: the unit
/// `test-fsync` measures and the WAL is configured with. Written `fdatasync` or
/// `fdatasync+direct`; PostgreSQL's `open_direct` is `open_datasync+direct`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SyncVariant {
    /// How writes become durable.
    pub method: SyncMethod,
    /// Whether the file is opened with `O_DIRECT`.
    pub direct: bool,
}

impl SyncVariant {
    /// The variant `fdatasync` without direct I/O: durable everywhere, the safe fallback.
    pub const SAFE_DEFAULT: SyncVariant = SyncVariant {
        method: SyncMethod::Fdatasync,
        direct: false,
    };

    /// Every method, each without and with direct I/O.
    pub fn all() -> impl Iterator<Item = SyncVariant> {
        SyncMethod::ALL.into_iter().flat_map(|method| {
            [false, true]
                .into_iter()
                .map(move |direct| SyncVariant { method, direct })
        })
    }
}

impl fmt::Display for SyncVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.direct {
            write!(f, "{}+direct", self.method)
        } else {
            write!(f, "{}", self.method)
        }
    }
}

impl FromStr for SyncVariant {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let (name, direct) = match s.strip_suffix("+direct") {
            Some(name) => (name, true),
            None => (s, false),
        };
        let variant = SyncVariant {
            method: name.parse()?,
            direct,
        };
        assert_eq!(
            variant.method.name(),
            name,
            "a parsed name prints back as itself"
        );
        Ok(variant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_round_trip_through_names() {
        for v in SyncVariant::all() {
            let parsed: SyncVariant = v.to_string().parse().expect("parse");
            assert_eq!(parsed, v);
        }
        assert_eq!(SyncVariant::all().count(), 12);
        assert!("fsync+buffered".parse::<SyncVariant>().is_err());
        assert!("open_direct".parse::<SyncVariant>().is_err());
    }

    #[test]
    fn only_none_is_not_durable() {
        for m in SyncMethod::ALL {
            assert_eq!(m.is_durable(), m != SyncMethod::None);
            assert_eq!(SyncMethod::DURABLE.contains(&m), m.is_durable());
        }
        assert_eq!(
            SyncMethod::OpenSync.open_flags() & libc::O_DSYNC,
            libc::O_DSYNC
        );
    }
}
