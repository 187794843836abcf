//! Ending a repaired pod's connections from the gap (the effect of [`super::gap`]): inside the pod's
//! namespace, its TCP sockets read from `/proc/thread-self/net/tcp{,6}` and its conntrack table dumped over
//! ctnetlink (the nf_tables socket), then every entry [`super::gap::fate`] says to end deleted, exactly
//! (its tuple, zone and id). A deleted entry ends its connection at its next packet: the packet starts a
//! new entry that the restored rules send to the proxy's port, where no socket has it, and the kernel
//! answers with a reset (this needs the kernel's default `nf_conntrack_tcp_loose=1` in the pod's namespace;
//! with 0 the packet is invalid and not NATed, so the connection is not ended: README).

use super::gap::{self, Fate};
use crate::error::{Error, Result};
use crate::nftables::conntrack::{self, AF_INET, AF_INET6};
use crate::nftables::socket::Socket;
use crate::redirect::Redirect;

/// The most connections ended per namespace and repair (the rest counted as left open).
pub const MAX_ENTRIES: usize = 65_536;

/// What ending a pod's connections from the gap did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// Connections ended (their entries deleted, or gone already).
    pub ended: usize,
    /// Connections of the application left open because their capture could not be judged
    /// ([`Fate::Unsure`]), or past [`MAX_ENTRIES`].
    pub left_open: usize,
}

/// The most bytes of each `/proc/net/tcp{,6}` read (about 50,000 sockets; a socket past it is not seen,
/// and a connection without a socket seen is never ended).
pub const MAX_SOCKETS_BYTES: u64 = 8 << 20;

fn read_bounded(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut t = String::new();
    std::fs::File::open(path)?
        .take(MAX_SOCKETS_BYTES)
        .read_to_string(&mut t)?;
    Ok(t)
}

fn sockets() -> Result<Vec<gap::Sock>> {
    let mut out = Vec::new();
    for (path, optional) in [
        ("/proc/thread-self/net/tcp", false),
        ("/proc/thread-self/net/tcp6", true),
    ] {
        match read_bounded(path) {
            Ok(t) => out.extend(gap::sockets(&t)),
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("read the pod's sockets ({path})"), e)),
        }
    }
    Ok(out)
}

/// Ends the connections of the namespace at `ns_path` that bypass the proxy now that the pod's rules
/// (`r`) are back.
pub fn end_gap_connections(ns_path: &str, r: Redirect) -> Result<Ended> {
    crate::netns::run_in(ns_path, move || {
        let socks = sockets()?;
        let local: Vec<std::net::IpAddr> = crate::netlink::addresses()?
            .into_iter()
            .map(|(_, a)| crate::redirect::values::unmap(a))
            .collect();
        let mut sock = Socket::open()?;
        let mut entries = Vec::new();
        let mut out = Ended::default();
        for family in [AF_INET, AF_INET6] {
            let seq = sock.next_seq(1);
            sock.dump(
                "conntrack: dump the pod's connections",
                &conntrack::dump_request(family, seq),
                &mut |m| {
                    let e = conntrack::entry(m, family)?;
                    match gap::fate(&e, &socks, &local, &r) {
                        Fate::Keep => {}
                        Fate::End if entries.len() < MAX_ENTRIES => entries.push(e),
                        Fate::End | Fate::Unsure => out.left_open += 1,
                    }
                    Ok(())
                },
            )?;
        }
        for e in &entries {
            let seq = sock.next_seq(1);
            match sock.dump(
                "conntrack: end a connection from the gap",
                &conntrack::delete_request(e, seq),
                &mut |_| Ok(()),
            ) {
                Ok(()) => out.ended += 1,
                // Ended by itself meanwhile.
                Err(Error::Io { source, .. })
                    if source.raw_os_error() == Some(nix::errno::Errno::ENOENT as i32) =>
                {
                    out.ended += 1
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    })
}
