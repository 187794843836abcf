//! The PEM bundles a kubeconfig and the service account carry: certificates, a client key.

use ureq::tls::{Certificate, PemItem};

use crate::error::{Error, Result};

fn bad(origin: &str, field: &str, why: &str) -> Error {
    Error::config(format!("{origin}: {field}: {why}"))
}

/// The items of the PEM bundle `pem`; unparsable PEM is an error naming `field`.
pub(crate) fn pem_items(pem: &[u8], origin: &str, field: &str) -> Result<Vec<PemItem<'static>>> {
    ureq::tls::parse_pem(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(origin, field, &format!("invalid PEM: {e}")))
}

/// The certificates of the PEM bundle `pem` (other items skipped).
pub(crate) fn certs(pem: &[u8], origin: &str, field: &str) -> Result<Vec<Certificate<'static>>> {
    let items = pem_items(pem, origin, field)?.into_iter();
    Ok(items
        .filter_map(|i| match i {
            PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect())
}

/// Checks that `pem` holds at least one certificate (and only parsable PEM).
pub(crate) fn check_certs(pem: &[u8], origin: &str, field: &str) -> Result<()> {
    if certs(pem, origin, field)?.is_empty() {
        return Err(bad(origin, field, "no PEM certificate found"));
    }
    Ok(())
}
