//! The repair agent: finds pods on this node that started without redirection and repairs them.

pub mod detect;
pub mod options;
pub mod request;
pub mod selector;
