//! The configuration logic: what the runtime loads and how our entry goes in and out of it.
//! Pure: [`select`] (the runtime's choice), [`libcni`] (libcni's validity rules), [`entry`] (ours),
//! [`conflist`] (merge and remove, byte-exact output), [`check`] (validity of the installed state),
//! [`layout`] (which files hold our entry; the owned file's derivation and check),
//! [`kubeconfig`] (rendering), [`selectors`]. Reading: [`plugin_dir`] (a list's plugin directory),
//! [`links`] (the candidates' link chains), [`cleanup`] (our entry out of the conf dir).

pub mod check;
pub mod cleanup;
pub mod conflist;
pub mod entry;
pub mod kubeconfig;
pub mod layout;
pub mod libcni;
pub mod links;
pub mod originals;
pub mod plugin_dir;
pub mod select;
pub mod selectors;
