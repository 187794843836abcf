//! Owner names of rule specs to ids through this host's NSS ([`crate::netfilter::owner`]).

use super::rule::OwnerKind;
use crate::error::Result;
use crate::netfilter::owner::{id, Owner};

/// [`super::spec::Names`] for real documents.
pub fn system(kind: OwnerKind, name: &str) -> Result<u32> {
    match kind {
        OwnerKind::Uid => id(Owner::User, name),
        OwnerKind::Gid => id(Owner::Group, name),
    }
}
