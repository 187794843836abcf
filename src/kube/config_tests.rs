//! Kubeconfig and in-cluster parsing: each accepted shape and each refusal.

use super::*;
use kube_double::b64;
use std::path::PathBuf;

/// The conformance directory (the CA and kubeconfigs of the kubeconfig cases are read from it;
/// a missing directory fails loudly).
fn conformance_dir() -> PathBuf {
    let d = std::env::var("CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance")
        });
    assert!(
        d.join("kubeconfig").is_dir(),
        "conformance vectors not found at {} (set CONFORMANCE_DIR)",
        d.display()
    );
    d
}

fn ca_pem() -> Vec<u8> {
    std::fs::read(conformance_dir().join("kubeconfig/master-tls-verify/ca.crt")).unwrap()
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        TempDir(crate::fsutil::test_dir(&format!("kube-config-{tag}")))
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn json_kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Config","clusters":[{{"name":"local","cluster":{{{cluster}}}}}],
        "users":[{{"name":"u","user":{{{user}}}}}],
        "contexts":[{{"name":"c","context":{{"cluster":"local","user":"u"}}}}],"current-context":"c"}}"#
    )
}

fn parse(text: &str, dir: &Path) -> Result<Config> {
    Config::from_kubeconfig_text(text, dir, "kubeconfig k")
}

#[test]
fn base64_roundtrip() {
    for s in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0, 255, 128, 7]] {
        assert_eq!(base64_decode(&b64(s)).unwrap(), s);
    }
    assert_eq!(base64_decode("YWJj\nZA==").unwrap(), b"abcd");
    assert!(base64_decode("ab*c").is_none());
    assert!(base64_decode("YQ==YQ").is_none());
}

#[test]
fn conformance_kubeconfigs() {
    let d = conformance_dir().join("kubeconfig");
    let tls = Config::from_kubeconfig(&d.join("master-tls-verify/expected")).unwrap();
    assert_eq!(tls.server, "https://10.96.0.1:443");
    assert_eq!(tls.ca_pem.as_deref(), Some(&ca_pem()[..]));
    assert!(!tls.insecure);
    assert_eq!(
        tls.token.as_ref().unwrap().get(),
        "service_account_token_string"
    );
    let newhost = Config::from_kubeconfig(&d.join("master-replace-newhost/expected")).unwrap();
    assert_eq!(newhost.server, "https://50.76.2.1:443");
    let skip = Config::from_kubeconfig(&d.join("master-skip-tls-verify/expected")).unwrap();
    assert!(skip.insecure && skip.ca_pem.is_none());
}

#[test]
fn json_kubeconfig_with_files_relative_to_its_dir() {
    let t = TempDir::new("files");
    std::fs::write(t.0.join("ca.pem"), ca_pem()).unwrap();
    let text = json_kubeconfig(
        r#""server":"https://[fd00::1]:6443/","certificate-authority":"ca.pem""#,
        r#""token":" inline-token\n""#,
    );
    let c = parse(&text, &t.0).unwrap();
    assert_eq!(c.server, "https://[fd00::1]:6443");
    assert_eq!(c.ca_pem.as_deref(), Some(&ca_pem()[..]));
    assert_eq!(c.token.unwrap().get(), "inline-token");
}

// Go's url.Parse lower-cases the scheme: client-go takes `HTTPS://` as `https://` (and `HTTP://` as
// plain `http://`, which we accept as it is written too).
#[test]
fn the_server_scheme_is_read_case_insensitively() {
    let t = TempDir::new("scheme");
    let ca = format!(r#""certificate-authority-data":"{}""#, b64(&ca_pem()));
    for (server, want) in [
        ("HTTPS://Api.Example:6443/", "https://Api.Example:6443"),
        ("Https://10.96.0.1", "https://10.96.0.1"),
        ("hTTp://10.96.0.1:80/prefix", "http://10.96.0.1:80/prefix"),
    ] {
        let c = parse(
            &json_kubeconfig(&format!(r#""server":"{server}",{ca}"#), ""),
            &t.0,
        );
        assert_eq!(c.map(|c| c.server).ok().as_deref(), Some(want), "{server}");
    }
    refused(
        &json_kubeconfig(&format!(r#""server":"HTTPS:/h",{ca}"#), ""),
        &t.0,
        &["cluster.server", "HTTPS:/h"],
    );
}

// clusters[].cluster.proxy-url as client-go's clientcmd checks it: http, https or socks5 (Go's url.Parse
// lower-cases the scheme), anything else refuses the kubeconfig; empty is unset.
#[test]
fn proxy_url_as_client_go_reads_it() {
    let t = TempDir::new("proxy-url");
    let ca = format!(r#""certificate-authority-data":"{}""#, b64(&ca_pem()));
    let with = |url: &str| {
        json_kubeconfig(
            &format!(r#""server":"https://h:443","proxy-url":"{url}",{ca}"#),
            "",
        )
    };
    for (url, want) in [
        ("HTTP://proxy:3128", Some("http://proxy:3128")),
        ("https://u:secret@proxy", Some("https://u:secret@proxy")),
        ("socks5://proxy:1080", Some("socks5://proxy:1080")),
        ("", None),
    ] {
        let c = parse(&with(url), &t.0).unwrap();
        assert_eq!(c.proxy_url.as_deref(), want, "{url}");
        // Set, it decides alone (the environment is not read): a socks5 one means a direct connection.
        if c.proxy_url.is_some() {
            let direct =
                super::super::proxy::for_client(c.proxy_url.as_deref(), &c.server, &c.origin)
                    .is_none();
            assert_eq!(direct, url.starts_with("socks5"), "{url}");
        }
    }
    let shown = format!(
        "{:?}",
        parse(&with("http://u:secret@proxy:3128/"), &t.0).unwrap()
    );
    assert!(
        shown.contains("http://<redacted>@proxy:3128/") && !shown.contains("secret"),
        "{shown}"
    );
    for (url, needles) in [
        ("ftp://proxy", &["unsupported scheme \"ftp\""][..]),
        ("socks4://proxy", &["unsupported scheme \"socks4\""]),
        ("proxy:3128", &["\"proxy:3128\" is not a URL"]),
        ("http://u:secret@/", &["names no host"]),
    ] {
        refused(&with(url), &t.0, needles);
        refused(&with(url), &t.0, &["clusters[local].cluster.proxy-url"]);
        let e = parse(&with(url), &t.0).unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
    }
}

#[test]
fn client_certificate_data_and_key() {
    let t = TempDir::new("cert");
    let key = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
    let text = json_kubeconfig(
        &format!(
            r#""server":"https://h:1","certificate-authority-data":"{}""#,
            b64(&ca_pem())
        ),
        &format!(
            r#""client-certificate-data":"{}","client-key-data":"{}""#,
            b64(&ca_pem()),
            b64(key)
        ),
    );
    let c = parse(&text, &t.0).unwrap();
    assert!(c.client_cert_pem.is_some() && c.client_key_pem.is_some() && c.token.is_none());
    // Debug (what a stray `{:?}` would log) never shows the key.
    let shown = format!("{c:?}");
    assert!(
        shown.contains("client_key_pem: Some(\"<redacted>\")"),
        "{shown}"
    );
    assert!(
        !shown.contains("PRIVATE") && !shown.contains("45, 45, 45"),
        "{shown}"
    );
    let only_cert = json_kubeconfig(
        &format!(
            r#""server":"https://h:1","certificate-authority-data":"{}""#,
            b64(&ca_pem())
        ),
        &format!(r#""client-certificate-data":"{}""#, b64(&ca_pem())),
    );
    let e = parse(&only_cert, &t.0).unwrap_err().to_string();
    assert!(e.contains("client-key"), "{e}");
}

fn refused(text: &str, dir: &Path, needles: &[&str]) {
    let e = parse(text, dir).unwrap_err().to_string();
    for n in needles {
        assert!(e.contains(n), "expected {n:?} in: {e}");
    }
    assert!(e.starts_with("kubeconfig k"), "{e}");
}

#[test]
fn refusals_name_the_field() {
    let t = TempDir::new("refuse");
    let refused_kc = |cluster: &str, user: &str, needles: &[&str]| {
        refused(&json_kubeconfig(cluster, user), &t.0, needles)
    };
    let ca = format!(r#""certificate-authority-data":"{}""#, b64(&ca_pem()));
    // No server: never fall back to localhost:8080.
    refused_kc(
        &ca,
        r#""token":"x""#,
        &["server", "missing", "localhost:8080"],
    );
    refused_kc(
        &format!(r#""server":"",{ca}"#),
        r#""token":"x""#,
        &["server"],
    );
    let srv = format!(r#""server":"https://h:443",{ca}"#);
    refused_kc(
        &srv,
        r#""exec":{"command":"/bin/sh","apiVersion":"client.authentication.k8s.io/v1"}"#,
        &["user.exec", "not supported"],
    );
    refused_kc(
        &srv,
        r#""auth-provider":{"name":"oidc"}"#,
        &["user.auth-provider"],
    );
    refused_kc(&srv, r#""username":"a","password":"b""#, &["user.username"]);
    // Never read a file named by the kubeconfig and send it as a credential.
    std::fs::write(t.0.join("secret"), "not-a-token").unwrap();
    refused_kc(
        &srv,
        r#""tokenFile":"secret""#,
        &["user.tokenFile", "not supported"],
    );
    // Unreadable, empty or garbage CA.
    refused_kc(
        r#""server":"https://h:443","certificate-authority":"/nonexistent/ca.crt""#,
        "",
        &["certificate-authority", "/nonexistent/ca.crt"],
    );
    std::fs::write(t.0.join("empty.crt"), "\n").unwrap();
    refused_kc(
        r#""server":"https://h:443","certificate-authority":"empty.crt""#,
        "",
        &["certificate-authority", "empty"],
    );
    refused_kc(
        r#""server":"https://h:443","certificate-authority-data":"bm90IGEgY2VydA==""#,
        "",
        &["certificate-authority", "no PEM certificate"],
    );
    refused_kc(
        r#""server":"https://h:443","certificate-authority-data":"%%%""#,
        "",
        &["certificate-authority-data", "base64"],
    );
    refused_kc(
        &format!(r#""server":"https://h:443","insecure-skip-tls-verify":true,{ca}"#),
        "",
        &["insecure-skip-tls-verify"],
    );
    refused_kc(
        &format!(r#""server":"ftp://h",{ca}"#),
        "",
        &["cluster.server", "ftp://h"],
    );
    // Missing pieces of the context graph.
    refused(
        r#"{"clusters":[],"users":[],"contexts":[{"name":"c","context":{"cluster":"nope"}}],"current-context":"c"}"#,
        &t.0,
        &["clusters", "nope"],
    );
    refused(
        r#"{"clusters":[],"contexts":[]}"#,
        &t.0,
        &["current-context"],
    );
    refused_kc(&srv, r#""token":7"#, &["\"token\"", "string"]);
}

#[test]
fn non_kubeconfig_files_are_refused_clearly() {
    let t = TempDir::new("garbage");
    refused("{not json", &t.0, &["not valid JSON"]);
    refused("key: &anchor x\n", &t.0, &["not JSON", "line 1"]);
    refused("- a\n- b\n", &t.0, &["not a kubeconfig"]);
    refused("\u{0}\u{1}binary", &t.0, &["not JSON"]);
    let e = Config::from_kubeconfig(Path::new("/nonexistent/kubeconfig")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/kubeconfig"), "{e}");
    assert_eq!(e.cni_code(), 5);
}

#[test]
fn in_cluster_settings() {
    let t = TempDir::new("sa");
    std::fs::write(t.0.join("ca.crt"), ca_pem()).unwrap();
    std::fs::write(t.0.join("token"), "sa-token").unwrap();
    let c = Config::in_cluster_from(Some("10.96.0.1".into()), Some("443".into()), &t.0).unwrap();
    assert_eq!(c.server, "https://10.96.0.1:443");
    assert_eq!(c.token.as_ref().unwrap().get(), "sa-token");
    let c = Config::in_cluster_from(Some("fd00::1".into()), Some("6443".into()), &t.0).unwrap();
    assert_eq!(c.server, "https://[fd00::1]:6443");

    let e = Config::in_cluster_from(None, Some("443".into()), &t.0).unwrap_err();
    assert!(e.to_string().contains("KUBERNETES_SERVICE_HOST"), "{e}");
    assert_eq!(e.cni_code(), 4);
    let e = Config::in_cluster_from(Some("h".into()), Some("".into()), &t.0).unwrap_err();
    assert!(e.to_string().contains("KUBERNETES_SERVICE_PORT"), "{e}");
    let e = Config::in_cluster_from(Some("h".into()), Some("http".into()), &t.0).unwrap_err();
    assert!(e.to_string().contains("\"http\""), "{e}");

    std::fs::remove_file(t.0.join("token")).unwrap();
    let e = Config::in_cluster_from(Some("h".into()), Some("1".into()), &t.0).unwrap_err();
    assert!(e.to_string().contains("token"), "{e}");
    std::fs::remove_file(t.0.join("ca.crt")).unwrap();
    let e = Config::in_cluster_from(Some("h".into()), Some("1".into()), &t.0).unwrap_err();
    assert!(e.to_string().contains("ca.crt"), "{e}");
}

// The plugin's kubeconfig, and the files it names, must be root's alone: another user able to write the CA
// it trusts could have another server answer for the API server.
#[test]
fn a_trusted_kubeconfig_and_the_files_it_names_are_writable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new("trusted");
    let chmod = |name: &str, mode: u32| {
        std::fs::set_permissions(t.0.join(name), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    std::fs::write(t.0.join("ca.pem"), ca_pem()).unwrap();
    let kc = json_kubeconfig(
        r#""server":"https://10.96.0.1:443","certificate-authority":"ca.pem""#,
        r#""token":"t""#,
    );
    std::fs::write(t.0.join("kc"), kc).unwrap();
    chmod("kc", 0o600);
    chmod("ca.pem", 0o644);
    let c = Config::from_trusted_kubeconfig(&t.0.join("kc")).unwrap();
    assert_eq!(c.ca_pem.as_deref(), Some(&ca_pem()[..]));
    // Its CA file is not read again (a reload would read it unchecked); an untrusted one's is.
    assert_eq!(c.ca_file, None);
    let c = Config::from_kubeconfig(&t.0.join("kc")).unwrap();
    assert_eq!(c.ca_file, Some(t.0.join("ca.pem")));
    for (file, mode) in [
        ("kc", 0o666),
        ("kc", 0o620),
        ("ca.pem", 0o666),
        ("ca.pem", 0o646),
    ] {
        chmod("kc", 0o600);
        chmod("ca.pem", 0o644);
        chmod(file, mode);
        let e = Config::from_trusted_kubeconfig(&t.0.join("kc"))
            .unwrap_err()
            .to_string();
        let path = t.0.join(file).display().to_string();
        assert!(
            e.contains(&path) && e.contains(&format!("mode {mode:o}")),
            "{file} {mode:o}: {e}"
        );
        // A kubeconfig the caller does not act on as root is read as it is.
        Config::from_kubeconfig(&t.0.join("kc")).unwrap();
    }
}
