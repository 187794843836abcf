//! The thin effect: one `NETLINK_NETFILTER` socket in the calling thread's network namespace (create it on
//! a thread inside the pod's namespace, [`crate::netns::run_in`]), a batch sent in one `sendmsg` with every
//! reply drained, and dumps read to `NLMSG_DONE`.

use super::batch::Batch;
use super::decode::{self, Msg};
use crate::error::{Error, Result};
use crate::netlink::{NLMSG_DONE, NLMSG_ERROR, NLM_F_MULTI};
use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Socket {
    fd: OwnedFd,
    buf: Vec<u8>,
    seq: u32,
}

fn io(what: &str, e: Errno) -> Error {
    Error::io(format!("nftables: {what}"), std::io::Error::from(e))
}

/// A kernel error for one message of a batch (`errno` 0: the kernel did not acknowledge it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub errno: i32,
    pub seq: u32,
}

impl Socket {
    pub fn open() -> Result<Socket> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkNetFilter,
        )
        .map_err(|e| io("open a NETLINK_NETFILTER socket", e))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| io("bind", e))?;
        // A dump that never ends must not hang ADD.
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(10, 0))
            .map_err(|e| io("set a receive timeout", e))?;
        // A batch queues one ack (its last message's) plus an error per refused message before we read:
        // the default receive buffer holds that; a dump is paced by our reads. An overflow would fail
        // closed (ENOBUFS, or no ack).
        Ok(Socket {
            fd,
            buf: vec![0u8; 1 << 16],
            seq: 1,
        })
    }

    /// A fresh sequence base for the next request (numbers only need to be unique per socket).
    pub fn next_seq(&mut self, n: u32) -> u32 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(n.max(1));
        s
    }

    fn send_all(&self, what: &str, bytes: &[u8]) -> Result<()> {
        let n = send(self.fd.as_raw_fd(), bytes, MsgFlags::empty()).map_err(|e| io(what, e))?;
        if n != bytes.len() {
            return Err(Error::other(format!(
                "nftables: {what}: short send ({n} of {})",
                bytes.len()
            )));
        }
        Ok(())
    }

    /// Sends `b` and collects the replies: the kernel has queued every reply when `sendmsg` returns
    /// (nfnetlink processes a batch synchronously), so the socket is drained without blocking. Returns
    /// the failures (a message without an ack as errno 0); empty means committed.
    pub fn run_batch(&mut self, b: &Batch) -> Result<Vec<Failure>> {
        self.run_raw(&b.bytes, b.what.last().map(|w| w.seq))
    }

    /// [`Socket::run_batch`] for a batch encoded elsewhere (iptables-nft's, [`crate::iptables::nft`]):
    /// `ack_seq` is the sequence number of its one message that asks for an ack.
    pub fn run_raw(&mut self, bytes: &[u8], ack_seq: Option<u32>) -> Result<Vec<Failure>> {
        self.send_all("send the batch", bytes)?;
        // A few replies (one ack, any errors): a list, not a hash set (whose seed costs a getrandom).
        let mut answered = Vec::new();
        let mut failures = Vec::new();
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(io("read the batch replies", e)),
            };
            for m in decode::messages(&self.buf[..n])? {
                if m.kind != NLMSG_ERROR {
                    continue;
                }
                let (errno, seq) = decode::error(&m)?;
                answered.push(seq);
                if errno != 0 {
                    failures.push(Failure { errno, seq });
                }
            }
        }
        // Only the last message asks for an ack: without it (and without an error) the batch did not
        // finish, which is a failure too.
        if failures.is_empty() {
            if let Some(seq) = ack_seq.filter(|s| !answered.contains(s)) {
                failures.push(Failure { errno: 0, seq });
            }
        }
        Ok(failures)
    }

    /// Sends a request and hands every reply message to `f` as it is received, up to `NLMSG_DONE` (or a
    /// single non-multipart reply): nothing is buffered beyond one receive. A kernel error is returned as
    /// `Err`, and so is an error from `f`, which leaves the rest of the dump unread: drop the socket then.
    pub fn dump(
        &mut self,
        what: &str,
        req: &[u8],
        f: &mut dyn FnMut(&Msg) -> Result<()>,
    ) -> Result<()> {
        self.send_all(what, req)?;
        loop {
            let n = loop {
                match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty()) {
                    Ok(n) => break n,
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(io(what, e)),
                }
            };
            let mut done = false;
            for m in decode::messages(&self.buf[..n])? {
                match m.kind {
                    NLMSG_DONE => done = true,
                    NLMSG_ERROR => {
                        let (errno, _) = decode::error(&m)?;
                        if errno != 0 {
                            return Err(io(what, Errno::from_raw(errno)));
                        }
                        done = true;
                    }
                    _ => {
                        if m.flags & NLM_F_MULTI == 0 {
                            done = true;
                        }
                        f(&m)?;
                    }
                }
            }
            if done {
                return Ok(());
            }
        }
    }
}
