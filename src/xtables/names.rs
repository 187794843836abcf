//! Owner names to ids through this host's NSS (`getpwnam_r`/`getgrnam_r`), as the node's tools resolve
//! `--uid-owner NAME` / `--gid-owner NAME` while parsing.

use super::rule::OwnerKind;
use crate::error::{Error, Result};

/// The uid or gid named `name`; an error naming it when the node has no such user or group.
pub fn system(kind: OwnerKind, name: &str) -> Result<u32> {
    let (what, found) = match kind {
        OwnerKind::Uid => (
            "user",
            nix::unistd::User::from_name(name).map(|u| u.map(|u| u.uid.as_raw())),
        ),
        OwnerKind::Gid => (
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
