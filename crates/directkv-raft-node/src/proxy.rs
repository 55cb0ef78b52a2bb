//! A fault-injecting TCP forwarder between two nodes on loopback: the fault
//! tests put one in front of every ordered pair of nodes (node `i` sends its
//! RPCs for node `j` to the forwarder `i → j`, see `--route`) and cut and
//! heal the pairs to partition the cluster.
//!
//! A cut forwarder is a black hole, not a closed port: it keeps accepting
//! connections and reading what arrives (up to one buffer per direction,
//! then TCP's own flow control holds the sender), and delivers nothing in
//! either direction. So a node's RPCs across a cut time out, as across a
//! real partition, instead of failing fast with a refused connection. Once
//! healed, what was held is delivered late (as a network that delays
//! packets would), and new connections go through.
//!
//! Invariants:
//! - Once a cut is set, no buffer read after it is written to either end
//!   of any connection until it is healed (a write already under way
//!   completes).
//! - Bytes are delivered in order and whole: a forwarder never drops or
//!   reorders within a connection (TCP's own guarantees, kept); it only
//!   delays.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes one direction of a connection reads ahead while cut.
const BUFFER_BYTES: usize = 64 * 1024;

/// A forwarder from a port of its own to a target address.
pub struct FaultProxy {
    addr: String,
    cut: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `target`; starts healed. Must be called inside a tokio runtime, which
    /// runs its tasks.
    ///
    /// # Errors
    /// No free port.
    pub async fn start(target: String) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let (cut, healed) = watch::channel(false);
        let target = Arc::new(target);
        let accept = tokio::spawn(async move {
            // A failed accept (out of descriptors) ends the forwarder: the
            // pair is then cut for good, which a partition test tolerates.
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(forward(inbound, target.clone(), healed.clone()));
            }
        });
        Ok(FaultProxy { addr, cut, accept })
    }

    /// The address to send to instead of the target.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Cuts (`true`) or heals (`false`) the pair.
    pub fn set_cut(&self, cut: bool) {
        // Only the receivers' end can be gone, after the accept task ended:
        // nothing is forwarded then anyway.
        let _ = self.cut.send(cut);
        assert_eq!(*self.cut.borrow(), cut, "the state is what was set");
    }

    /// Whether the pair is cut.
    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits until the pair is healed; `false` when the forwarder is gone.
async fn until_healed(state: &mut watch::Receiver<bool>) -> bool {
    state.wait_for(|cut| !cut).await.is_ok()
}

/// One connection: connects to the target once healed, then pumps both
/// directions until either end closes.
async fn forward(inbound: TcpStream, target: Arc<String>, mut state: watch::Receiver<bool>) {
    if !until_healed(&mut state).await {
        return;
    }
    let Ok(outbound) = TcpStream::connect(target.as_str()).await else {
        return; // the node is down: the caller sees the connection close
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let up = tokio::spawn(pump(in_read, out_write, state.clone()));
    let down = tokio::spawn(pump(out_read, in_write, state));
    // Either direction's end ends the connection: the other pump's read
    // fails or returns once its peer closes.
    let _ = tokio::join!(up, down);
}

/// Copies `from` to `to`, holding each buffer while the pair is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; BUFFER_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        assert!(n <= BUFFER_BYTES, "a read fits its buffer");
        if !until_healed(&mut state).await {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
