//! The configuration logic: what the runtime loads and how our entry goes in and out of it.
//! Pure: [`select`] (the runtime's choice), [`libcni`] (libcni's validity rules), [`entry`] (ours),
//! [`conflist`] (merge and remove, byte-exact output), [`check`] (validity of the installed state),
//! [`kubeconfig`] (rendering), [`selectors`]. Reading: [`plugin_dir`] (a list's plugin directory),
//! [`links`] (the candidates' link chains), [`cleanup`] (our entry out of the conf dir).

pub mod check;
pub mod cleanup;
pub mod conflist;
pub mod entry;
pub mod kubeconfig;
pub mod libcni;
pub mod links;
pub mod plugin_dir;
pub mod select;
pub mod selectors;
