//! openraft's own storage conformance suite, whole, against directkv-raft:
//! the log store and the state machine of one database per case.

use directkv_raft::{LogStore, StateMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir");
        let opts = directkv::Options {
            cache_bytes: 8 << 20,
            // Named, not measured at each open of a new directory.
            wal_sync: Some(directkv::SyncVariant {
                method: directkv::SyncMethod::Fdatasync,
                direct: true,
            }),
            wal_segment_bytes: 1 << 20,
            data_extend_bytes: 0,
            publish_stats: false,
            ..directkv::Options::default()
        };
        let (log, sm) = directkv_raft::open(dir.path(), opts).expect("open");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("the suite passes");
}
