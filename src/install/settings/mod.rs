//! What the installer is told: the command line [`flags`], the settings resolved from them and the
//! environment [`options`] (with the log levels, [`log_settings`]), and the old installers' settings it
//! refuses by name ([`legacy`]).

pub mod flags;
pub mod legacy;
pub mod log_settings;
pub mod options;
mod readers;
