//! The Kubernetes client against the HTTPS API double (tests/kube-double): TLS, tokens, retries, faults,
//! configuration refusals, fresh-process latency. (List/watch/writes: kube_api.rs.) Loopback only.

use std::path::Path;
use std::time::{Duration, Instant};

use istio_cni::kube::status::{REASON_TIMEOUT, REASON_TLS_VERIFY};
use istio_cni::kube::{
    get_pod_with_retry, ApiErrorExt, Client, Config, EventKind, PodSource, WatchParams,
};
use kube_double::{Fault, Options, Server};

use crate::support::kube::*;

#[test]
fn tls_get_pod_with_the_installer_kubeconfig() {
    let srv = start();
    let dir = TempDir::new("tls");
    srv.add_pod(&pod_json("testNS", "testPod", "n1")).unwrap();
    let c = client(&srv, &dir);
    let pod = c.get_pod("testNS", "testPod").unwrap();
    assert_eq!(name_of(&pod), "testPod");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].path, "/api/v1/namespaces/testNS/pods/testPod");
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some(format!("Bearer {}", srv.token()).as_str())
    );
    // The same client again (connection reuse) and a JSON kubeconfig naming the server by DNS name.
    c.get_pod("testNS", "testPod").unwrap();
    let json_kc = format!(
        r#"{{"apiVersion":"v1","kind":"Config","clusters":[{{"name":"c","cluster":{{"server":"https://localhost:{}","certificate-authority":"ca.pem"}}}}],"users":[{{"name":"u","user":{{"token":"{}"}}}}],"contexts":[{{"name":"x","context":{{"cluster":"c","user":"u"}}}}],"current-context":"x"}}"#,
        srv.addr().port(),
        srv.token()
    );
    std::fs::write(dir.join("ca.pem"), srv.ca_pem()).unwrap();
    std::fs::write(dir.join("kc.json"), json_kc).unwrap();
    let c2 = Client::from_kubeconfig(&dir.join("kc.json")).unwrap();
    assert_eq!(
        name_of(&c2.get_pod("testNS", "testPod").unwrap()),
        "testPod"
    );
}

#[test]
fn ipv6_loopback_server_when_available() {
    let opts = Options {
        listen: "[::1]:0".parse().unwrap(),
        ..Options::default()
    };
    let srv = match Server::start(opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "NOTE: ipv6_loopback_server_when_available: no IPv6 loopback here ({e}); not run"
            );
            return;
        }
    };
    let dir = TempDir::new("v6");
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let kc = dir.join("kubeconfig");
    std::fs::write(&kc, srv.kubeconfig_for(&srv.url())).unwrap();
    assert!(srv.url().starts_with("https://[::1]:"));
    let c = Client::from_kubeconfig(&kc).unwrap();
    assert_eq!(name_of(&c.get_pod("ns", "p").unwrap()), "p");
}

#[test]
fn wrong_ca_fails_fast_with_tls_verification() {
    let srv = start();
    let dir = TempDir::new("wrongca");
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    // A kubeconfig trusting another CA.
    let kc = srv.kubeconfig().replace(
        &b64(srv.ca_pem().as_bytes()),
        &b64(srv.other_ca_pem().as_bytes()),
    );
    std::fs::write(dir.join("kc"), kc).unwrap();
    let c = Client::from_kubeconfig(&dir.join("kc")).unwrap();
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.api_reason(), Some(REASON_TLS_VERIFY), "{e}");
    assert!(!e.is_transient());
    assert!(e.to_string().contains("attempt 1"), "{e}");
    assert_eq!(e.cni_code(), 101);
    assert!(
        srv.requests().is_empty(),
        "no request may pass an unverified TLS session"
    );

    // The right CA, but the server presents a certificate from another CA.
    let good = client(&srv, &dir);
    srv.set_fault(Fault::WrongCert, None);
    let e = get_pod_with_retry(&good, "ns", "p", "", Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.api_reason(), Some(REASON_TLS_VERIFY), "{e}");
    srv.clear_fault();
    good.get_pod("ns", "p").unwrap();
}

#[test]
fn insecure_skip_tls_verify_only_when_asked() {
    let srv = start();
    let dir = TempDir::new("insecure");
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let kc = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    insecure-skip-tls-verify: true\n    server: {}\n  name: local\ncontexts:\n- context:\n    cluster: local\n    user: istio-cni\n  name: istio-cni-context\ncurrent-context: istio-cni-context\nkind: Config\nusers:\n- name: istio-cni\n  user:\n    token: {}\n",
        srv.url(),
        srv.token()
    );
    std::fs::write(dir.join("kc"), &kc).unwrap();
    let c = Client::from_kubeconfig(&dir.join("kc")).unwrap();
    assert_eq!(name_of(&c.get_pod("ns", "p").unwrap()), "p");
    // Without the flag and without a CA: refused before any connection.
    std::fs::write(
        dir.join("kc2"),
        kc.replace("    insecure-skip-tls-verify: true\n", ""),
    )
    .unwrap();
    let e = Client::from_kubeconfig(&dir.join("kc2"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("certificate-authority") && e.contains("insecure-skip-tls-verify"),
        "{e}"
    );
}

/// A double serving pod ns/p, a service-account dir `tag` holding its CA and token, and an in-cluster
/// client reading them.
fn in_cluster_with_a_pod(tag: &str) -> (Server, TempDir, Client) {
    let srv = start();
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let sa = TempDir::new(tag);
    std::fs::write(sa.join("ca.crt"), srv.ca_pem()).unwrap();
    std::fs::write(sa.join("token"), srv.token()).unwrap();
    let cfg = Config::in_cluster_from(
        Some("127.0.0.1".into()),
        Some(srv.addr().port().to_string()),
        sa.path(),
    )
    .unwrap();
    let c = Client::from_config(cfg).unwrap();
    (srv, sa, c)
}

// The cluster's serving CA rotates under a running agent: the kubelet swaps the projected ca.crt to the
// new bundle and the API server presents a certificate of the new CA. client-go reloads a CA file
// (ClientsAllowCARotation); without it the pod cache's watch and the repair agent fail until restarted.
#[test]
fn rotated_cluster_ca_is_trusted_without_restart() {
    let (srv, sa, c) = in_cluster_with_a_pod("sa-ca");
    // A second client, for a watch that meets the new certificate first (its own retry).
    let watcher = Client::from_config(
        Config::in_cluster_from(
            Some("127.0.0.1".into()),
            Some(srv.addr().port().to_string()),
            sa.path(),
        )
        .unwrap(),
    )
    .unwrap();

    // Still the old CA alone in the file: the new certificate is refused.
    srv.set_fault(Fault::WrongCert, None);
    let e = c.get_pod("ns", "p").unwrap_err();
    assert_eq!(e.api_reason(), Some(REASON_TLS_VERIFY), "{e}");
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());

    // The rotated bundle (old and new), swapped in atomically.
    let bundle = format!("{}{}", srv.ca_pem(), srv.other_ca_pem());
    std::fs::write(sa.join("ca.crt.new"), bundle).unwrap();
    std::fs::rename(sa.join("ca.crt.new"), sa.join("ca.crt")).unwrap();
    assert_eq!(name_of(&c.get_pod("ns", "p").unwrap()), "p");
    let mut w = watcher
        .watch_pods(&WatchParams {
            timeout_seconds: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(w.next().unwrap().unwrap().kind, EventKind::Added);
}

// A ca.crt the rotation left unreadable or empty keeps the CA in use; never an unverified connection.
#[test]
fn an_unreadable_rotated_ca_keeps_the_last_good_one() {
    let (srv, sa, c) = in_cluster_with_a_pod("sa-ca-bad");
    for bad in [
        "",
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    ] {
        std::fs::write(sa.join("ca.crt"), bad).unwrap();
        srv.set_fault(Fault::WrongCert, None);
        let e = c.get_pod("ns", "p").unwrap_err();
        assert_eq!(e.api_reason(), Some(REASON_TLS_VERIFY), "{e}");
        srv.clear_fault();
    }
    std::fs::remove_file(sa.join("ca.crt")).unwrap();
    assert_eq!(name_of(&c.get_pod("ns", "p").unwrap()), "p");
}

#[test]
fn rotated_service_account_token_is_used_without_restart() {
    let srv = start();
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let sa = TempDir::new("sa");
    std::fs::write(sa.join("ca.crt"), srv.ca_pem()).unwrap();
    std::fs::write(sa.join("token"), srv.token()).unwrap();
    let cfg = Config::in_cluster_from(
        Some("127.0.0.1".into()),
        Some(srv.addr().port().to_string()),
        sa.path(),
    )
    .unwrap();
    let c = Client::from_config(cfg).unwrap();
    c.get_pod("ns", "p").unwrap();

    // The kubelet rotates the token (atomic rename, like the ..data symlink swap); the old one is revoked.
    let new = "rotated-token-2";
    std::fs::write(sa.join("token.new"), new).unwrap();
    std::fs::rename(sa.join("token.new"), sa.join("token")).unwrap();
    srv.set_token(new);
    srv.clear_requests();
    let pod = c.get_pod("ns", "p").unwrap();
    assert_eq!(name_of(&pod), "p");
    let auth: Vec<_> = srv
        .requests()
        .iter()
        .map(|r| (r.status, r.authorization.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        auth.last().unwrap(),
        &(200, format!("Bearer {new}")),
        "{auth:?}"
    );

    // Watches pick it up as well.
    let newer = "rotated-token-3";
    std::fs::write(sa.join("token"), newer).unwrap();
    srv.set_token(newer);
    let mut w = c
        .watch_pods(&WatchParams {
            timeout_seconds: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(w.next().unwrap().unwrap().kind, EventKind::Added);
}

#[test]
fn transient_failures_are_retried_then_succeed() {
    let srv = start();
    let dir = TempDir::new("retry");
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let c = fast_client(&srv, &dir, Duration::from_millis(700));
    for fault in [
        Fault::Status(503),
        Fault::Status(500),
        Fault::Status(429),
        Fault::Drop,
    ] {
        srv.clear_requests();
        srv.set_fault(fault.clone(), Some(2));
        let pod = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(30)).unwrap();
        assert_eq!(name_of(&pod), "p");
        let statuses: Vec<u16> = srv.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses.len(), 3, "{fault:?}: {statuses:?}");
        assert_eq!(statuses[2], 200, "{fault:?}");
    }
    // A server that accepts and then says nothing: the attempt times out, the next one succeeds.
    srv.set_fault(Fault::Hang, Some(1));
    let c = fast_client(&srv, &dir, Duration::from_millis(700));
    let pod = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(30)).unwrap();
    assert_eq!(name_of(&pod), "p");
    srv.clear_fault();
}

#[test]
fn not_found_is_retried_until_the_pod_appears() {
    let srv = start();
    let dir = TempDir::new("404");
    let c = client(&srv, &dir);
    let e = c.get_pod("ns", "late").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let adder = std::thread::spawn({
        let pod = pod_json("ns", "late", "n1");
        let url = srv.url();
        let ca = srv.ca_pem();
        let dir2 = TempDir::new("404-admin");
        move || {
            std::thread::sleep(Duration::from_millis(300));
            // Through the admin endpoint, as a script would.
            std::fs::write(dir2.join("ca"), ca).unwrap();
            let out = std::process::Command::new("curl")
                .args(["-sf", "--cacert"])
                .arg(dir2.join("ca"))
                .args(["-X", "POST", "-d", &pod, &format!("{url}/_double/pods")])
                .output();
            out.map(|o| o.status.success()).unwrap_or(false)
        }
    });
    let res = get_pod_with_retry(&c, "ns", "late", "", Duration::from_secs(20));
    let via_curl = adder.join().unwrap();
    if !via_curl {
        // No curl on this machine: add it through the library instead; the retry must still be running.
        srv.add_pod(&pod_json("ns", "late", "n1")).unwrap();
    }
    match res {
        Ok(pod) => assert_eq!(name_of(&pod), "late"),
        Err(e) => panic!("pod added after 300 ms was not found within 20 s: {e}"),
    }
}

#[test]
fn retries_stop_at_the_deadline() {
    let srv = start();
    let dir = TempDir::new("deadline");
    let c = fast_client(&srv, &dir, Duration::from_millis(500));
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    srv.set_fault(Fault::Status(500), None);
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_millis(1500)).unwrap_err();
    assert_eq!(e.api_status(), Some(500), "{e}");
    assert!(e.to_string().contains("gave up after"), "{e}");
    assert!(srv.requests().len() >= 2);

    // Hung connections: every attempt times out; the deadline still ends the loop. (A new client: the
    // fault applies to new connections, and the old client holds a kept-alive one.)
    srv.set_fault(Fault::Hang, None);
    let c = fast_client(&srv, &dir, Duration::from_millis(500));
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_millis(1500)).unwrap_err();
    assert_eq!(e.api_reason(), Some(REASON_TIMEOUT), "{e}");
    srv.clear_fault();
}

#[test]
fn unauthorized_and_forbidden_fail_fast() {
    let srv = start();
    let dir = TempDir::new("authz");
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let c = client(&srv, &dir);
    srv.set_fault(Fault::Status(403), None);
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.api_status(), Some(403));
    assert!(e.to_string().contains("Forbidden"), "{e}");
    assert_eq!(srv.requests().len(), 1);
    srv.clear_fault();

    srv.clear_requests();
    srv.set_token("somebody-else");
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.api_status(), Some(401), "{e}");
    assert!(e.to_string().contains("Unauthorized"), "{e}");
    assert_eq!(
        srv.requests().len(),
        1,
        "a fixed kubeconfig token is not retried"
    );
}

#[test]
fn refused_configuration_never_dials() {
    let srv = start();
    let dir = TempDir::new("noserver");
    let kc = srv
        .kubeconfig()
        .replace(&format!("    server: {}\n", srv.url()), "");
    std::fs::write(dir.join("kc"), kc).unwrap();
    let e = Client::from_kubeconfig(&dir.join("kc"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("server") && e.contains("localhost:8080"), "{e}");
    assert!(srv.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------------
// HTTPS_PROXY from the environment carries the API requests (as client-go's), through the TCP connector
// with keepalive: a child process, since the variable is read when a client is built.

const PROXY_CHILD_ENV: &str = "KUBE_CLIENT_PROXY_KUBECONFIG";

#[test]
#[ignore = "child process of https_proxy_from_the_environment_carries_the_requests"]
fn proxy_child_get_once() {
    let kc = std::env::var(PROXY_CHILD_ENV).expect("run by the proxy test only");
    let c = Client::from_kubeconfig(Path::new(&kc)).unwrap();
    assert_eq!(name_of(&c.get_pod("testNS", "testPod").unwrap()), "testPod");
}

/// A CONNECT proxy on loopback: records each request line, then splices both ways.
fn connect_proxy() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut client) = c else { return };
            let mut r = BufReader::new(client.try_clone().unwrap());
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 2 {
                line.clear();
            }
            log.lock().unwrap().push(first.trim().to_string());
            let target = first.split_whitespace().nth(1).unwrap_or("").to_string();
            let Ok(mut up) = std::net::TcpStream::connect(&target) else {
                let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                continue;
            };
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .unwrap();
            let (mut up2, mut client2) = (up.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut r, &mut up2));
            std::thread::spawn(move || std::io::copy(&mut up, &mut client2));
        }
    });
    (port, seen)
}

/// Runs [`proxy_child_get_once`] in a child process with the kubeconfig `kc` and the proxy variables
/// `vars` (all others unset).
fn get_in_child(kc: &str, vars: &[(&str, String)]) {
    let dir = TempDir::new("proxy");
    std::fs::write(dir.join("kc"), kc).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "kube_client::proxy_child_get_once",
        "--ignored",
        "--test-threads=1",
    ])
    .env(PROXY_CHILD_ENV, dir.join("kc"));
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{vars:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 passed"), "the child ran no test: {said}");
}

/// [`get_in_child`] with `srv`'s kubeconfig and the proxy variables `vars` (`PROXY_PORT` in a value is a
/// CONNECT proxy's port); returns the request lines that proxy saw.
fn get_through_env(srv: &Server, vars: &[(&str, String)]) -> Vec<String> {
    let (port, seen) = connect_proxy();
    let vars: Vec<_> = vars
        .iter()
        .map(|(k, v)| (*k, v.replace("PROXY_PORT", &port.to_string())))
        .collect();
    get_in_child(&srv.kubeconfig(), &vars);
    let seen = seen.lock().unwrap().clone();
    seen
}

#[test]
fn https_proxy_from_the_environment_carries_the_requests() {
    let srv = start();
    srv.add_pod(&pod_json("testNS", "testPod", "n1")).unwrap();
    let proxy = "http://127.0.0.1:PROXY_PORT".to_string();
    let seen = get_through_env(&srv, &[("HTTPS_PROXY", proxy)]);
    let want = format!("CONNECT {} HTTP/1.1", srv.addr());
    assert_eq!(seen, vec![want]);
}

// NO_PROXY and the proxy variables as client-go reads them (Go's ProxyFromEnvironment): the runtime that
// runs the plugin often carries HTTPS_PROXY with NO_PROXY naming the service CIDR, spaced after commas.
#[test]
fn no_proxy_and_the_proxy_variables_are_read_as_client_go_reads_them() {
    let srv = start();
    srv.add_pod(&pod_json("testNS", "testPod", "n1")).unwrap();
    let proxy = || "http://127.0.0.1:PROXY_PORT".to_string();
    let direct: [&[(&str, String)]; 4] = [
        // A CIDR holding the server, after a space.
        &[
            ("HTTPS_PROXY", proxy()),
            ("NO_PROXY", "example.com, 127.0.0.0/8".into()),
        ],
        // The server's IP with its port, lower-case variables.
        &[
            ("https_proxy", proxy()),
            ("no_proxy", format!("example.com,  {} ", srv.addr())),
        ],
        // HTTP_PROXY and ALL_PROXY are not for an https:// server.
        &[("HTTP_PROXY", proxy())],
        &[("ALL_PROXY", proxy())],
    ];
    for vars in direct {
        assert_eq!(
            get_through_env(&srv, vars),
            Vec::<String>::new(),
            "{vars:?}"
        );
    }
    // An exclusion that does not cover the server leaves the proxy in use.
    let seen = get_through_env(
        &srv,
        &[
            ("HTTPS_PROXY", proxy()),
            ("NO_PROXY", "10.0.0.0/8, .svc, 127.0.0.1:1".into()),
        ],
    );
    assert_eq!(seen, vec![format!("CONNECT {} HTTP/1.1", srv.addr())]);
}

// A kubeconfig's clusters[].cluster.proxy-url carries that cluster's requests instead of the environment's
// proxy (client-go's clientcmd sets rest.Config.Proxy = http.ProxyURL(u): neither HTTPS_PROXY nor NO_PROXY
// is read then). A socks5 proxy-url is passed over for a direct connection with a warning, as a SOCKS proxy
// from the environment is; the environment is not read then either.
#[test]
fn the_kubeconfig_proxy_url_carries_the_requests_instead_of_the_environment() {
    let srv = start();
    srv.add_pod(&pod_json("testNS", "testPod", "n1")).unwrap();
    let with_proxy_url = |url: &str| {
        srv.kubeconfig().replace(
            "    server: ",
            &format!("    proxy-url: {url}\n    server: "),
        )
    };
    let (port, seen) = connect_proxy();
    let (env_port, env_seen) = connect_proxy();
    let env = [
        ("HTTPS_PROXY", format!("http://127.0.0.1:{env_port}")),
        ("NO_PROXY", "*".to_string()),
    ];
    get_in_child(&with_proxy_url(&format!("HTTP://127.0.0.1:{port}")), &env);
    let connect = format!("CONNECT {} HTTP/1.1", srv.addr());
    assert_eq!(*seen.lock().unwrap(), vec![connect.clone()]);
    get_in_child(&with_proxy_url("socks5://127.0.0.1:1"), &env);
    assert_eq!(srv.requests().len(), 2, "both GETs reached the server");
    assert_eq!(*seen.lock().unwrap(), vec![connect]);
    assert_eq!(*env_seen.lock().unwrap(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------------------
// Latency: median of 100 pod GETs, each in a fresh process (TLS handshake included). Run with
//   cargo test --release --test kube_client -- --ignored --nocapture fresh_process_get_latency

const CHILD_ENV: &str = "KUBE_CLIENT_BENCH_KUBECONFIG";

#[test]
#[ignore = "child process of fresh_process_get_latency"]
fn bench_child_get_once() {
    let kc = std::env::var(CHILD_ENV).expect("run by fresh_process_get_latency only");
    let t = Instant::now();
    let c = Client::from_kubeconfig(Path::new(&kc)).unwrap();
    let pod = c.get_pod("testNS", "testPod").unwrap();
    assert_eq!(name_of(&pod), "testPod");
    // On its own line: the harness prints "test ... " without a newline before the body runs.
    println!("\nIN_PROCESS_US={}", t.elapsed().as_micros());
}

#[test]
#[ignore = "benchmark; run explicitly"]
fn fresh_process_get_latency() {
    let srv = start();
    let dir = TempDir::new("bench");
    srv.add_pod(&pod_json("testNS", "testPod", "n1")).unwrap();
    srv.write_kubeconfig(&dir.join("kc")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let (mut wall, mut inproc) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let t = Instant::now();
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "kube_client::bench_child_get_once",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.join("kc"))
            .output()
            .unwrap();
        wall.push(t.elapsed().as_micros());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let us: u128 = text
            .lines()
            .find_map(|l| l.split_once("IN_PROCESS_US=").map(|(_, v)| v))
            .and_then(|v| v.trim().parse().ok())
            .expect("child printed its time");
        inproc.push(us);
    }
    wall.sort();
    inproc.sort();
    println!(
        "fresh-process pod GET over TLS, 100 runs: median wall (spawn..exit) {} us, p90 {} us; \
         median in-process (config+TLS+GET) {} us, p90 {} us",
        wall[50], wall[90], inproc[50], inproc[90]
    );
    assert_eq!(srv.requests().len(), 100);
}
