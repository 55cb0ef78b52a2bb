//! The body of openraft's RPCs between nodes: bincode, not JSON.
//!
//! openraft gives an append RPC one heartbeat interval to be answered
//! (it times out at `heartbeat_interval` and sends again). As JSON a byte
//! of a value is an array element of up to four characters, so an entry
//! holding a value of [`VALUE_MAX`](directkv_raft::VALUE_MAX) bytes was
//! several MiB to print and parse on each side. On a busy machine that
//! took longer than the heartbeat, every attempt timed out, and the
//! entries behind it joined the next, larger attempt: the follower never
//! caught up. In bincode a value is its bytes and a length, and an append
//! carries at most [`APPEND_BYTES_MAX`] of entries (see
//! [`crate::network`]), so one attempt's cost is bounded and small.
//!
//! The client API (`/kv/…`, `/cluster/…`) stays JSON, for people and
//! their tools.

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

fn options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(BODY_BYTES_MAX as u64)
}

/// `value` as a body.
///
/// # Panics
/// When `value` does not encode: openraft's messages and the node's
/// commands always do, within the limit.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    options()
        .serialize(value)
        .expect("an RPC message encodes within the body limit")
}

/// The value a body holds.
///
/// # Errors
/// The body is not one (truncated, malformed, over the limit).
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> bincode::Result<T> {
    options().deserialize(body)
}

/// How many bytes `value` encodes to.
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
        ([(header::CONTENT_TYPE, CONTENT_TYPE)], encode(&self.0)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use directkv_raft::{NodeId, Request as Command, TypeConfig, VALUE_MAX};
    use openraft::error::{Fatal, RaftError};
    use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

    fn entry(index: u64, value_bytes: usize) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), index),
            payload: EntryPayload::Normal(Command::Put {
                key: vec![b'k'],
                value: vec![7; value_bytes],
            }),
        }
    }

    /// An append of the largest value, and the answers to one, come back
    /// as they went; the body is the value and little more.
    #[test]
    fn an_append_of_the_largest_value_round_trips_compactly() {
        let rpc = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new(CommittedLeaderId::new(2, 2), 9)),
            leader_commit: Some(LogId::new(CommittedLeaderId::new(2, 2), 8)),
            entries: vec![entry(10, VALUE_MAX)],
        };
        let body = encode(&rpc);
        assert!(body.len() < VALUE_MAX + 128, "{} bytes", body.len());
        let back: AppendEntriesRequest<TypeConfig> = decode(&body).expect("decodes");
        assert_eq!(back.entries.len(), 1);
        assert_eq!(back.entries[0].log_id, rpc.entries[0].log_id);
        assert_eq!(back.entries[0].payload, rpc.entries[0].payload);
        assert_eq!(back.vote, rpc.vote);
        assert_eq!(back.prev_log_id, rpc.prev_log_id);
        assert_eq!(back.leader_commit, rpc.leader_commit);
        for resp in [
            AppendEntriesResponse::<NodeId>::Success,
            AppendEntriesResponse::Conflict,
            AppendEntriesResponse::HigherVote(Vote::new(4, 2)),
        ] {
            let back: AppendEntriesResponse<NodeId> = decode(&encode(&resp)).expect("decodes");
            assert_eq!(back, resp);
        }
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
            let back: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> =
                decode(&encode(&err)).expect("decodes");
            assert_eq!(
                back.map_err(|e| e.to_string()),
                err.map_err(|e| e.to_string())
            );
        }
    }

    /// A cut or garbled body is an error, not a panic or a huge allocation.
    #[test]
    fn a_malformed_body_is_an_error() {
        let body = encode(&vec![entry(1, 100), entry(2, 100)]);
        for cut in [0, 1, body.len() / 2, body.len() - 1] {
            assert!(decode::<Vec<Entry<TypeConfig>>>(&body[..cut]).is_err());
        }
        // A length prefix claiming far more than the body holds.
        let mut lying = encode(&vec![0u8; 4]);
        lying[0] = 0xfd; // varint: a u64 follows
        lying.truncate(1);
        lying.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode::<Vec<u8>>(&lying).is_err());
        let mut trailing = encode(&5u64);
        trailing.push(0);
        assert!(decode::<u64>(&trailing).is_err(), "trailing bytes");
    }
}
