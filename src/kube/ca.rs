//! A cluster CA read from a file that can change under a running process: the service account's projected
//! `ca.crt` (the kubelet swaps it when the cluster's serving CA rotates), or a kubeconfig's
//! `certificate-authority` file. client-go reloads such a file (`ClientsAllowCARotation`); without it a
//! long-running agent (the pod cache's watch, the repair agent) fails every new connection once the API
//! server presents a certificate of the new CA, until restarted.
//!
//! Like [`super::token`]: the file is looked at (metadata first, content only on change) at most every
//! [`RECHECK`], and at once after a failed certificate verification. Only a file holding at least one
//! parsable certificate replaces the roots in use; an unreadable, empty or unparsable one keeps them
//! (warned once per version of the file), so a half-written file never leaves a connection unverified.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use super::config::check_certs;
use super::token::RECHECK;
use crate::fsutil::Stamp;

/// A CA file and the certificates last taken from it.
pub struct CaFile {
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    /// The PEM in use.
    pem: Vec<u8>,
    checked: Instant,
    /// The file's stamp when last read (`None`: not there then).
    stamp: Option<Stamp>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|m| Stamp::of(&m))
}

impl CaFile {
    /// `pem`, just read from `path`, is in use.
    pub fn new(path: PathBuf, pem: Vec<u8>) -> CaFile {
        let stamp = stamp(&path);
        CaFile {
            path,
            state: Mutex::new(State {
                pem,
                checked: Instant::now(),
                stamp,
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's certificates when they differ from those in use (which they then become), looked at
    /// if [`RECHECK`] has passed or `force`.
    pub fn changed(&self, force: bool) -> Option<Vec<u8>> {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !force && st.checked.elapsed() < RECHECK {
            return None;
        }
        st.checked = Instant::now();
        let now = stamp(&self.path);
        if now == st.stamp && !force {
            return None;
        }
        let what = format!("CA file {}", self.path.display());
        let pem = std::fs::read(&self.path);
        // Warned once per version of the file, not at every look.
        let warn = now != st.stamp;
        st.stamp = now;
        let pem = match pem {
            Ok(pem) if pem == st.pem => return None,
            Ok(pem) => match check_certs(&pem, &what, "certificates") {
                Ok(()) => pem,
                Err(e) => {
                    if warn {
                        log::warn!("{e}; keeping the CA in use");
                    }
                    return None;
                }
            },
            Err(e) => {
                if warn {
                    log::warn!("{what}: {e}; keeping the CA in use");
                }
                return None;
            }
        };
        log::info!("{what} changed: trusting its certificates from now on");
        st.pem = pem.clone();
        Some(pem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_file_with_certificates_replaces_the_roots() {
        let dir = crate::fsutil::test_dir("kube-ca");
        let p = dir.join("ca.crt");
        let pem = |n: u8| {
            let cert = rcgen_free_cert(n);
            std::fs::write(&p, &cert).unwrap();
            cert
        };
        let first = pem(1);
        let ca = CaFile::new(p.clone(), first.clone());
        assert_eq!(ca.changed(true), None, "unchanged");
        let second = pem(2);
        assert_eq!(ca.changed(true), Some(second.clone()));
        assert_eq!(ca.changed(true), None, "now in use");
        for bad in [
            &b""[..],
            b"not pem",
            b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
        ] {
            std::fs::write(&p, bad).unwrap();
            assert_eq!(ca.changed(true), None, "{bad:?}");
        }
        std::fs::remove_file(&p).unwrap();
        assert_eq!(ca.changed(true), None);
        // Back to what is in use: nothing to do; a third one is taken.
        std::fs::write(&p, &second).unwrap();
        assert_eq!(ca.changed(true), None);
        let third = pem(3);
        assert_eq!(ca.changed(true), Some(third));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A PEM block that parses as a certificate item (its content is not checked by the parser).
    fn rcgen_free_cert(n: u8) -> Vec<u8> {
        let body = crate::install::config::kubeconfig::base64(&[0x30, 0x03, 0x02, 0x01, n]);
        format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n").into_bytes()
    }
}
