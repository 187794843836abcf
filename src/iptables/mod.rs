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
