//! The two getsockopt calls that read one legacy x_tables table (`IPT_SO_GET_INFO`, `IPT_SO_GET_ENTRIES`,
//! and their `IP6T_` twins, which have the same numbers) from a raw socket in the current thread's
//! network namespace (needs `CAP_NET_RAW`/`CAP_NET_ADMIN`, which the plugin has).

use super::entries::{self, Info, ENTRIES_HEADER, INFO_LEN};
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
use std::os::fd::{AsRawFd, OwnedFd};

/// How often a table that changed between our read and our write is read and written again. Each
/// `EAGAIN` means another writer's replace landed in between, so with fewer concurrent writers than this
/// every one of them lands.
pub const ATTEMPTS: usize = 16;

const SO_GET_INFO: libc::c_int = 64;
const SO_GET_ENTRIES: libc::c_int = 65;
/// A table larger than this is not read (a pod could build one to stall us): fail closed.
const MAX_TABLE_BYTES: usize = 16 << 20;

fn io(what: String, e: Errno) -> Error {
    Error::io(what, std::io::Error::from(e))
}

/// `getsockopt(fd, level, opt, buf)`; returns the length the kernel reports.
fn get(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `buf` is a live, exclusively borrowed buffer of exactly `len` bytes, and the kernel writes
    // at most `len` bytes to it (and updates `len`); `fd` is an open socket for the whole call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(Errno::last());
    }
    Ok(len as usize)
}

/// Reads table `name` (IPv6 if `v6`): its info and its entries.
pub fn read(v6: bool, name: &str) -> Result<(Info, Vec<u8>)> {
    let (family, level, fam) = if v6 {
        (AddressFamily::Inet6, libc::IPPROTO_IPV6, "IPv6")
    } else {
        (AddressFamily::Inet, libc::IPPROTO_IP, "IPv4")
    };
    let what = |step: &str| format!("read the legacy iptables table {name} ({fam}): {step}");
    let fd = socket(
        family,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Raw,
    )
    .map_err(|e| io(what("open a raw socket"), e))?;
    if name.is_empty() || name.len() >= 32 {
        return Err(Error::other(what("bad table name")));
    }
    // The table can change between the two calls (the kernel then refuses the size): read again. Each
    // retry means another writer's replace (or first use) landed in between; as many tries as a legacy
    // restore makes.
    for _ in 0..ATTEMPTS {
        let mut buf = [0u8; INFO_LEN];
        buf[..name.len()].copy_from_slice(name.as_bytes());
        match get(&fd, level, SO_GET_INFO, &mut buf) {
            Ok(_) => {}
            // The kernel makes a namespace's table on its first use, outside its lock: a caller that
            // raced another one's first use is told EEXIST, and the table exists now.
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(io(what("get info"), e)),
        }
        let info = entries::info(&buf)?;
        let size = info.size as usize;
        if size > MAX_TABLE_BYTES {
            return Err(Error::Rules(format!(
                "{}: {size} bytes is more than we read ({MAX_TABLE_BYTES}); failing closed",
                what("too large to verify")
            )));
        }
        let mut entries = vec![0u8; ENTRIES_HEADER + size];
        entries[..name.len()].copy_from_slice(name.as_bytes());
        entries[32..36].copy_from_slice(&info.size.to_ne_bytes());
        match get(&fd, level, SO_GET_ENTRIES, &mut entries) {
            Ok(_) => {
                entries.drain(..ENTRIES_HEADER);
                return Ok((info, entries));
            }
            Err(Errno::EAGAIN) => continue,
            Err(e) => return Err(io(what("get entries"), e)),
        }
    }
    Err(Error::other(what("it kept changing while we read it")))
}
