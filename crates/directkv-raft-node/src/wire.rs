//! The body of openraft's RPCs between nodes: bincode, not JSON.
//!
//! openraft gives an append RPC one heartbeat interval to be answered; it
//! then sends it again, with the entries logged since. The cost of one
//! attempt must therefore stay small and bounded whatever the values'
//! sizes: in bincode a value travels as its length and its bytes (JSON
//! prints each byte as an array element of up to four characters), and an
//! append carries at most [`APPEND_BYTES_MAX`] of entries (see
//! [`crate::network`]). `docs/raft.md` has the measurements.
//!
//! The client API (`/kv/…`, `/cluster/…`) stays JSON, for people and
//! their tools. Nodes of versions that spoke JSON between them cannot
//! join a cluster of these: a whole cluster is upgraded at once.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The content type of a bincode body.
pub(crate) const CONTENT_TYPE: &str = "application/octet-stream";

/// The bytes of entries one append RPC carries at most, unless its first
/// entry alone is larger (a batch of up to
/// [`BATCH_MAX_BYTES`](directkv_raft::BATCH_MAX_BYTES) travels whole).
pub const APPEND_BYTES_MAX: usize = 4 << 20;

/// The largest body a node takes on any route, and the largest RPC body it
/// encodes or decodes. An entry is either a client's request, which came
/// as JSON under this limit (and bincode is never longer than JSON), or a
/// proposal of at most `BATCH_MAX_BYTES` of commands; an append carries
/// one entry, or entries up to [`APPEND_BYTES_MAX`].
pub(crate) const BODY_BYTES_MAX: usize = 64 << 20;

const _: () = assert!(APPEND_BYTES_MAX < BODY_BYTES_MAX / 2);
const _: () = assert!(directkv_raft::BATCH_MAX_BYTES < BODY_BYTES_MAX / 2);

fn options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(BODY_BYTES_MAX as u64)
}

/// `value` as a body.
///
/// # Errors
/// `value` encodes to more than the body limit (see [`BODY_BYTES_MAX`]
/// for why no message of a node should).
pub(crate) fn encode<T: Serialize>(value: &T) -> bincode::Result<Vec<u8>> {
    let body = options().serialize(value)?;
    assert!(
        body.len() <= BODY_BYTES_MAX,
        "the encoder holds a body to the limit the decoder takes"
    );
    Ok(body)
}

/// The value a body holds.
///
/// # Errors
/// The body is not one (truncated, malformed, over the limit).
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> bincode::Result<T> {
    options().deserialize(body)
}

/// How many bytes `value` encodes to; `usize::MAX` when that is over the
/// body limit (it cannot be sent).
pub(crate) fn encoded_len<T: Serialize>(value: &T) -> usize {
    options()
        .serialized_size(value)
        .map_or(usize::MAX, |n| n as usize)
}

/// An RPC's request or answer, as a bincode body.
pub(crate) struct Bin<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Bin<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        decode(&body).map(Bin).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("a malformed RPC body: {e}"),
            )
                .into_response()
        })
    }
}

impl<T: Serialize> IntoResponse for Bin<T> {
    fn into_response(self) -> Response {
        match encode(&self.0) {
            Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("an RPC answer that does not encode: {e}"),
            )
                .into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fmt::Debug;

    use directkv_raft::{NodeId, Request as Command, TypeConfig, VALUE_MAX};
    use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
    use openraft::raft::{
        AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest,
        InstallSnapshotResponse, VoteRequest, VoteResponse,
    };
    use openraft::{
        BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta,
        SnapshotSegmentId, StoredMembership, Vote,
    };

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry(index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
        Entry {
            log_id: log_id(3, index),
            payload,
        }
    }

    fn put(index: u64, value_bytes: usize) -> Entry<TypeConfig> {
        entry(
            index,
            EntryPayload::Normal(Command::Put {
                key: vec![b'k'],
                value: vec![7; value_bytes],
            }),
        )
    }

    fn membership() -> Membership<NodeId, BasicNode> {
        let nodes: BTreeMap<NodeId, BasicNode> = (1..=3)
            .map(|id| (id, BasicNode::new(format!("127.0.0.1:{}", 7000 + id))))
            .collect();
        Membership::from(nodes)
    }

    /// `value` through a body and back.
    fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
        decode(&encode(value).expect("encodes")).expect("decodes")
    }

    fn same<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: T) {
        assert_eq!(round_trip(&value), value);
    }

    /// An append of the largest value comes back as it went; the body is
    /// the value and little more.
    #[test]
    fn an_append_of_the_largest_value_round_trips_compactly() {
        let rpc = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(2, 9)),
            leader_commit: Some(log_id(2, 8)),
            entries: vec![put(10, VALUE_MAX)],
        };
        let body = encode(&rpc).expect("encodes");
        assert!(body.len() < VALUE_MAX + 128, "{} bytes", body.len());
        let back: AppendEntriesRequest<TypeConfig> = decode(&body).expect("decodes");
        assert_eq!(back.entries, rpc.entries);
        assert_eq!(back.vote, rpc.vote);
        assert_eq!(back.prev_log_id, rpc.prev_log_id);
        assert_eq!(back.leader_commit, rpc.leader_commit);
    }

    /// Every kind of entry, and every RPC's request and answer, come back
    /// as they went.
    #[test]
    fn every_message_round_trips() {
        let entries = vec![
            entry(1, EntryPayload::Blank),
            entry(2, EntryPayload::Membership(membership())),
            entry(
                3,
                EntryPayload::Normal(Command::Batch(vec![
                    Command::Delete { key: vec![1] },
                    Command::CompareAndSet {
                        key: vec![2],
                        expected: None,
                        new: Some(vec![3; 10]),
                    },
                ])),
            ),
        ];
        assert_eq!(round_trip(&entries), entries);
        same(AppendEntriesResponse::<NodeId>::Success);
        same(AppendEntriesResponse::<NodeId>::PartialSuccess(Some(
            log_id(1, 4),
        )));
        same(AppendEntriesResponse::<NodeId>::Conflict);
        same(AppendEntriesResponse::<NodeId>::HigherVote(Vote::new(4, 2)));
        same(VoteRequest::new(Vote::new(5, 2), Some(log_id(4, 40))));
        same(VoteResponse::new(
            Vote::new(5, 2),
            Some(log_id(4, 41)),
            true,
        ));
        let chunk = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(5, 2),
            meta: SnapshotMeta {
                last_log_id: Some(log_id(5, 100)),
                last_membership: StoredMembership::new(Some(log_id(1, 2)), membership()),
                snapshot_id: "5-100-7".into(),
            },
            offset: 1 << 20,
            data: vec![9; 1000],
            done: true,
        };
        let back = round_trip(&chunk);
        assert_eq!(
            (back.vote, back.meta, back.offset, back.data, back.done),
            (chunk.vote, chunk.meta, chunk.offset, chunk.data, chunk.done)
        );
        same(InstallSnapshotResponse::<NodeId> {
            vote: Vote::new(6, 3),
        });
        let mismatch = SnapshotMismatch {
            expect: SnapshotSegmentId {
                id: "a".into(),
                offset: 0,
            },
            got: SnapshotSegmentId {
                id: "b".into(),
                offset: 5,
            },
        };
        let err: Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> =
            Err(RaftError::APIError(mismatch.into()));
        assert_eq!(round_trip(&err), err);
    }

    /// A node's errors reach the caller as they were raised.
    #[test]
    fn errors_round_trip() {
        let storage = openraft::StorageError::from_io_error(
            openraft::ErrorSubject::Store,
            openraft::ErrorVerb::Write,
            std::io::Error::other("the disk is gone"),
        );
        for fatal in [
            Fatal::Stopped,
            Fatal::Panicked,
            Fatal::StorageError(storage),
        ] {
            let err: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> =
                Err(RaftError::Fatal(fatal));
            assert_eq!(
                round_trip(&err).map_err(|e| e.to_string()),
                err.map_err(|e| e.to_string())
            );
        }
    }

    /// A cut, padded or lying body is an error, not a panic; a message over
    /// the limit does not encode.
    #[test]
    fn a_malformed_or_oversized_body_is_an_error() {
        let body = encode(&vec![put(1, 100), put(2, 100)]).expect("encodes");
        for cut in [0, 1, body.len() / 2, body.len() - 1] {
            assert!(decode::<Vec<Entry<TypeConfig>>>(&body[..cut]).is_err());
        }
        let mut trailing = encode(&5u64).expect("encodes");
        trailing.push(0);
        assert!(decode::<u64>(&trailing).is_err(), "trailing bytes");
        // A length prefix of u64::MAX (varint marker 0xfd, then 8 bytes).
        let mut lying = vec![0xfd];
        lying.extend_from_slice(&u64::MAX.to_le_bytes());
        lying.extend_from_slice(&[1, 2, 3]);
        assert!(decode::<Vec<u8>>(&lying).is_err());
        let over = vec![0u8; BODY_BYTES_MAX];
        assert!(encode(&over).is_err(), "over the limit with its length");
        assert_eq!(encoded_len(&over), usize::MAX);
    }
}
