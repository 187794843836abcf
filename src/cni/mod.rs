//! The CNI protocol, pure: environment, `CNI_ARGS`, network configuration, versions and results.
//! Nothing here touches the OS; [`crate::plugin`] wires it to the process.

pub mod args;
pub mod conf;
pub mod env;
pub mod result;
pub mod version;

pub use args::K8sArgs;
pub use conf::NetConf;
pub use env::{CmdEnv, Command};
