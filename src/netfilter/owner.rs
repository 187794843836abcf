//! Owner names to ids through this host's NSS (`getpwnam_r`/`getgrnam_r`), as the node's tools resolve
//! `--uid-owner NAME` / `--gid-owner NAME` (iptables) or `skgid NAME` (nft) while parsing.

use crate::error::{Error, Result};

/// Which kind of id a name stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    User,
    Group,
}

/// The uid or gid named `name`; an error naming it when the node has no such user or group.
pub fn id(kind: Owner, name: &str) -> Result<u32> {
    let (what, found) = match kind {
        Owner::User => (
            "user",
            nix::unistd::User::from_name(name).map(|u| u.map(|u| u.uid.as_raw())),
        ),
        Owner::Group => (
            "group",
            nix::unistd::Group::from_name(name).map(|g| g.map(|g| g.gid.as_raw())),
        ),
    };
    match found {
        Ok(Some(id)) => Ok(id),
        Ok(None) => Err(Error::Rules(format!(
            "owner {what} {name:?} does not exist on this node (the rules need its numeric id)"
        ))),
        Err(e) => Err(Error::io(
            format!("look up {what} {name:?}"),
            std::io::Error::from(e),
        )),
    }
}
