//! `kube-double`: run the API server double for scripts, the demo and benchmarks.
//!
//! ```text
//! kube-double [--listen 127.0.0.1:0] [--pods DIR_OR_FILE]... [--kubeconfig-out PATH] [--ca-out PATH]
//!             [--token T] [--ready-file PATH] [--bookmark-interval-ms N]
//! ```
//! Prints `listening on https://ADDR` and serves until killed. `--ready-file` is written (with the URL)
//! after the pods are loaded and the kubeconfig is written. Admin endpoints: see the library docs.

use std::path::PathBuf;
use std::time::Duration;

use kube_double::{Options, Server};

fn usage() -> ! {
    eprintln!(
        "usage: kube-double [--listen ADDR] [--pods DIR_OR_FILE]... [--kubeconfig-out PATH] [--ca-out PATH] \
         [--token T] [--ready-file PATH] [--bookmark-interval-ms N]"
    );
    std::process::exit(2)
}

fn main() {
    let mut opts = Options::default();
    let (mut pods, mut kubeconfig, mut ca_out, mut ready) = (Vec::new(), None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--listen" => {
                opts.listen = val().parse().unwrap_or_else(|e| {
                    eprintln!("kube-double: --listen: {e}");
                    usage()
                })
            }
            "--pods" => pods.push(PathBuf::from(val())),
            "--kubeconfig-out" => kubeconfig = Some(PathBuf::from(val())),
            "--ca-out" => ca_out = Some(PathBuf::from(val())),
            "--token" => opts.token = val(),
            "--ready-file" => ready = Some(PathBuf::from(val())),
            "--bookmark-interval-ms" => {
                opts.bookmark_interval =
                    Duration::from_millis(val().parse().unwrap_or_else(|_| usage()))
            }
            "-h" | "--help" => usage(),
            other => {
                eprintln!("kube-double: unknown argument {other:?}");
                usage()
            }
        }
    }
    let fail = |what: &str, e: std::io::Error| -> ! {
        eprintln!("kube-double: {what}: {e}");
        std::process::exit(1)
    };
    let srv = Server::start(opts).unwrap_or_else(|e| fail("start", e));
    for p in &pods {
        match srv.add_pods_from(p) {
            Ok(n) => eprintln!("kube-double: loaded {n} pods from {}", p.display()),
            Err(e) => fail(&format!("load pods from {}", p.display()), e),
        }
    }
    if let Some(k) = &kubeconfig {
        srv.write_kubeconfig(k)
            .unwrap_or_else(|e| fail("write kubeconfig", e));
    }
    if let Some(c) = &ca_out {
        std::fs::write(c, srv.ca_pem()).unwrap_or_else(|e| fail("write CA", e));
    }
    println!("listening on {}", srv.url());
    if let Some(r) = &ready {
        kube_double::write_private(r, format!("{}\n", srv.url()).as_bytes())
            .unwrap_or_else(|e| fail("write ready file", e));
    }
    loop {
        std::thread::park();
    }
}
