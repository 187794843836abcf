//! Applying rules: backend detection, writing and reading them in the pod netns ([`io`]: the kernel's own
//! interfaces, or the node's binaries when asked), convergence of existing state, and CHECK. The rule text
//! itself comes from [`crate::redirect`].

pub mod apply;
pub mod backend;
pub mod exec;
pub mod foreign;
pub mod io;
pub mod nft;
pub mod save;
pub mod state;
pub mod tool;

pub use backend::Backend;
pub use io::Io;
