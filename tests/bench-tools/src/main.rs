//! `bench-floor`: the floors scripts/bench measures next to the plugin, as a fresh process per run. It
//! does the least a plugin must do, in order, with the same TLS stack (ureq + rustls/ring) and the same
//! static musl build as the shipped binary:
//!
//! ```text
//! bench-floor STEP...
//!   get CA_FILE TOKEN URL       one HTTPS GET verified against CA_FILE with a bearer token; 200 required
//!   netns PATH                  enter the network namespace at PATH (the children below inherit it)
//!   restore PROG DOC_FILE       PROG --noflush < DOC_FILE   (PROG is e.g. iptables-nft-restore)
//!   restore-lock PROG DOC_FILE  the same with --wait=30 and XTABLES_LOCKFILE=/proc/self/ns/net (legacy)
//!   save PROG                   PROG, its output read and discarded
//! ```
//! Exit 0 when every step succeeded; otherwise 1 with the failing step on stderr. Dev-only, never shipped.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ureq::tls::{PemItem, RootCerts, TlsConfig, TlsProvider};

type Res<T> = Result<T, String>;

fn get(ca_file: &str, token: &str, url: &str) -> Res<()> {
    let pem = std::fs::read(ca_file).map_err(|e| format!("read {ca_file}: {e}"))?;
    let roots: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if roots.is_empty() {
        return Err(format!("{ca_file}: no certificate"));
    }
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(RootCerts::Specific(Arc::new(roots)))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Accept", "application/json")
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_vec()
        .map_err(|e| format!("GET {url}: read body: {e}"))?;
    if status != 200 {
        return Err(format!(
            "GET {url}: status {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

fn enter(path: &str) -> Res<()> {
    let f = std::fs::File::open(path).map_err(|e| format!("open {path}: {e}"))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("setns {path}: {e}"))
}

fn run(prog: &str, args: &[&str], lock: bool, stdin: Option<&str>) -> Res<()> {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if lock {
        c.env("XTABLES_LOCKFILE", "/proc/self/ns/net");
    }
    let mut child = c.spawn().map_err(|e| format!("start {prog}: {e}"))?;
    if let (Some(file), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let mut doc = Vec::new();
        std::fs::File::open(file)
            .and_then(|mut f| f.read_to_end(&mut doc))
            .map_err(|e| format!("read {file}: {e}"))?;
        pipe.write_all(&doc)
            .map_err(|e| format!("write to {prog}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wait for {prog}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{prog} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn steps(args: &[String]) -> Res<()> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut i = 0;
    if a.is_empty() {
        return Err("usage: bench-floor STEP... (get CA TOKEN URL | netns PATH | restore PROG DOC | restore-lock PROG DOC | save PROG)".into());
    }
    while i < a.len() {
        let need = |n: usize| -> Res<&[&str]> {
            a.get(i + 1..i + 1 + n)
                .ok_or_else(|| format!("{}: needs {n} argument(s)", a[i]))
        };
        match a[i] {
            "get" => {
                let p = need(3)?;
                get(p[0], p[1], p[2])?;
                i += 4;
            }
            "netns" => {
                enter(need(1)?[0])?;
                i += 2;
            }
            "restore" => {
                let p = need(2)?;
                run(p[0], &["--noflush"], false, Some(p[1]))?;
                i += 3;
            }
            "restore-lock" => {
                let p = need(2)?;
                run(p[0], &["--noflush", "--wait=30"], true, Some(p[1]))?;
                i += 3;
            }
            "save" => {
                run(need(1)?[0], &[], false, None)?;
                i += 2;
            }
            other => return Err(format!("unknown step {other:?}")),
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = steps(&args) {
        eprintln!("bench-floor: {e}");
        std::process::exit(1);
    }
}
