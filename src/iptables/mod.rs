//! Applying rules: backend detection, `iptables-restore`/`-save` exec inside the pod netns, convergence of
//! existing state, and CHECK. The rule text itself comes from [`crate::redirect`].

pub mod applet_link;
pub mod apply;
pub mod backend;
pub mod exec;
pub mod foreign;
pub mod node_root;
pub mod nss;
pub mod save;
pub mod state;
pub mod tool;

pub use backend::Backend;

/// An IP family: which `iptables`/`ip6tables` tool set to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}
