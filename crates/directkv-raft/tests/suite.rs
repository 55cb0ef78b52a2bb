//! openraft's own storage conformance suite, whole, against directkv-raft:
//! the log store and the state machine of one database per case.

mod common;

use directkv_raft::{LogStore, StateMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = common::scratch();
        let opts = common::options(8192);
        let (log, sm) = directkv_raft::open(dir.path(), opts).expect("open");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).expect("the suite passes");
}
