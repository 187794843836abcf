//! The two setsockopt calls that write one legacy x_tables table in the current thread's network
//! namespace (`IPT_SO_SET_REPLACE`, `IPT_SO_SET_ADD_COUNTERS` and their `IP6T_` twins, same numbers), as
//! libiptc's commit makes them. Reading is [`crate::xtables::sockopt`].

use super::blob::Built;
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
use std::os::fd::{AsRawFd, OwnedFd};

const SO_SET_REPLACE: libc::c_int = 64;
const SO_SET_ADD_COUNTERS: libc::c_int = 65;
/// `sizeof(struct ipt_replace)` (= `ip6t_replace`) before the entries.
const REPLACE_HEADER: usize = 96;
/// `sizeof(struct xt_counters_info)` before the counters.
const COUNTERS_HEADER: usize = 40;
/// `struct xt_counters`: packets, bytes.
pub const COUNTER_SIZE: usize = 16;

/// A raw socket of the family (needs `CAP_NET_RAW`/`CAP_NET_ADMIN`, which the plugin has) and its level.
pub fn open(v6: bool) -> Result<(OwnedFd, libc::c_int)> {
    let (family, level) = if v6 {
        (AddressFamily::Inet6, libc::IPPROTO_IPV6)
    } else {
        (AddressFamily::Inet, libc::IPPROTO_IP)
    };
    let fd = socket(
        family,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Raw,
    )
    .map_err(|e| {
        Error::io(
            "open a raw socket to write legacy iptables",
            std::io::Error::from(e),
        )
    })?;
    Ok((fd, level))
}

fn set(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, buf: &[u8]) -> Result<(), Errno> {
    let len = libc::socklen_t::try_from(buf.len()).map_err(|_| Errno::E2BIG)?;
    // SAFETY: `buf` is a live buffer of exactly `len` bytes for the whole call, and `fd` an open socket.
    // For SET_REPLACE the buffer also holds a pointer to the counters buffer the kernel writes to; the
    // caller keeps that buffer alive and large enough across this call (see `replace`).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_ptr().cast::<libc::c_void>(),
            len,
        )
    };
    if rc < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn name_field(name: &str) -> Result<[u8; 32], Errno> {
    let mut n = [0u8; 32];
    if name.is_empty() || name.len() >= n.len() {
        return Err(Errno::EINVAL);
    }
    n[..name.len()].copy_from_slice(name.as_bytes());
    Ok(n)
}

/// Swaps table `name` for `built`; `num_counters` must be the entry count of the table it replaces (the
/// kernel answers `EAGAIN` when it changed since). Returns the replaced table's counters, one
/// [`COUNTER_SIZE`] record per old entry.
pub fn replace(
    fd: &OwnedFd,
    level: libc::c_int,
    name: &str,
    built: &Built,
    num_counters: u32,
) -> Result<Vec<u8>, Errno> {
    let mut counters = vec![0u8; (num_counters as usize).max(1) * COUNTER_SIZE];
    let size = u32::try_from(built.entries.len()).map_err(|_| Errno::E2BIG)?;
    let mut b = Vec::with_capacity(REPLACE_HEADER + built.entries.len());
    b.extend(name_field(name)?);
    b.extend(built.valid_hooks.to_ne_bytes());
    b.extend(built.num_entries.to_ne_bytes());
    b.extend(size.to_ne_bytes());
    built
        .hook_entry
        .iter()
        .for_each(|h| b.extend(h.to_ne_bytes()));
    built
        .underflow
        .iter()
        .for_each(|h| b.extend(h.to_ne_bytes()));
    b.extend(num_counters.to_ne_bytes());
    b.extend((counters.as_mut_ptr() as u64).to_ne_bytes());
    b.extend(&built.entries);
    // `counters` lives until the end of this function, after the call that writes to it.
    set(fd, level, SO_SET_REPLACE, &b)?;
    counters.truncate(num_counters as usize * COUNTER_SIZE);
    Ok(counters)
}

/// Adds `counters` (one record per entry of the table now in place) to table `name`.
pub fn add_counters(
    fd: &OwnedFd,
    level: libc::c_int,
    name: &str,
    counters: &[u8],
) -> Result<(), Errno> {
    let n = u32::try_from(counters.len() / COUNTER_SIZE).map_err(|_| Errno::E2BIG)?;
    let mut b = Vec::with_capacity(COUNTERS_HEADER + counters.len());
    b.extend(name_field(name)?);
    b.extend(n.to_ne_bytes());
    b.extend([0u8; 4]);
    b.extend(counters);
    set(fd, level, SO_SET_ADD_COUNTERS, &b)
}
