//! Certificates generated at start: a CA and a server certificate for 127.0.0.1, ::1 and localhost, plus
//! an unrelated CA's certificate for the "wrong certificate" fault.

use std::io;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("kube-double tls: {e}"))
}

/// A CA plus a server certificate it signed.
pub struct Pki {
    pub ca_pem: String,
    pub config: Arc<ServerConfig>,
}

fn ca(name: &str) -> io::Result<(CertificateParams, KeyPair, String)> {
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((params, key, cert.pem()))
}

/// Generates a fresh CA named `ca_name` and a server certificate for `names` (DNS names or IPs).
pub fn generate(ca_name: &str, names: &[String]) -> io::Result<Pki> {
    let (ca_params, ca_key, ca_pem) = ca(ca_name)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(names.to_vec()).map_err(err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate().map_err(err)?;
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(err)?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(err)?;
    Ok(Pki {
        ca_pem,
        config: Arc::new(config),
    })
}
