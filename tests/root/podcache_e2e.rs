//! The node-local pod cache end to end (root): `install-cni` runs as the node's agent against the HTTPS
//! API double (its pod watch fills the cache it serves on the run dir's `pod-cache.sock`), and our plugin
//! is exec'd as a runtime does for pods in namespaces the test makes. The double records every API
//! request: with the agent running, pod starts read no pod from the API server; with
//! `POD_CACHE_ENABLED=false`, each reads its pod once. Through an API outage cached pods start and
//! uncached ones fail closed; a pod recreated under its name gets the new pod's decision; a SIGKILLed
//! agent's socket sends the next ADD to the API server.

use crate::support::e2e::*;
use crate::support::podcache::{pod_gets, Agent, NODE};
use crate::support::*;
use kube_double::Fault;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SEQUENTIAL: usize = 200;
const CONCURRENT: usize = 50;

/// `n` pods with a sidecar, served by the double (each in its own namespace holding only `lo`).
fn pods<'a>(node: &'a Node, tag: &str, n: usize) -> Vec<Pod<'a>> {
    (0..n)
        .map(|i| node.bare_pod(&format!("{tag}-{i}"), (i % 250) as u8))
        .collect()
}

/// ADD for the first `SEQUENTIAL` pods one after the other, then for the rest all at once.
fn start_all(pods: &[Pod]) {
    for p in &pods[..SEQUENTIAL] {
        p.add().assert_success();
    }
    std::thread::scope(|s| {
        let started: Vec<_> = pods[SEQUENTIAL..]
            .iter()
            .map(|p| s.spawn(move || p.add()))
            .collect();
        for h in started {
            h.join().unwrap().assert_success();
        }
    });
}

/// Every pod has exactly `want` (the rules the plugin programs for these pods).
fn assert_rules(pods: &[Pod], want: &str) {
    for p in pods {
        assert_eq!(p.save("iptables-nft-save"), want, "pod {}", p.name);
    }
}

#[test]
fn pod_starts_read_no_pod_from_the_api_server_while_the_agent_runs() {
    if !require_root() {
        return;
    }
    let node = Node::new(61);
    let run = node.dir.join("run");
    let agent = Agent::start(&node.srv, &run, NODE, &[]);
    let cached = pods(&node, "cached", SEQUENTIAL + CONCURRENT);
    agent.wait_synced();
    agent.wait_pods(cached.len() as u64);
    node.srv.clear_requests();
    start_all(&cached);
    assert_eq!(
        pod_gets(&node.srv),
        Vec::<String>::new(),
        "pod GETs with the cache\n{}",
        agent.log()
    );
    let want = cached[0].save("iptables-nft-save");
    assert!(
        want.contains("-A ISTIO_OUTPUT") && want.contains("ISTIO_IN_REDIRECT"),
        "{want}"
    );
    assert_rules(&cached, &want);
    let hits = agent.lookups("hit");
    assert!(hits >= cached.len() as u64, "{}", agent.metrics_text());
    assert!(
        agent.log().contains("pod lookup") && agent.log().contains("ms (cache)"),
        "the relayed ADD lines say where the pod came from:\n{}",
        agent.log()
    );
    drop(agent);

    // The same run with the cache off: the installer's entry says so, and every pod is read once.
    let mut agent = Agent::start(&node.srv, &run, NODE, &[("POD_CACHE_ENABLED", "false")]);
    let conflist = agent.dir.join("conf/10-primary.conflist");
    poll_until(
        "our entry with pod_cache false",
        Duration::from_secs(10),
        || std::fs::read_to_string(&conflist).is_ok_and(|t| t.contains("\"pod_cache\": false")),
    );
    // A listener where the socket was: the plugin must never connect to it.
    let sock = agent.socket();
    let _ = std::fs::remove_file(&sock);
    let spy = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    spy.set_nonblocking(true).unwrap();
    // A lookup deadline of 30 s (each GET attempt up to 7.5 s, not the node's 2 s and 500 ms): on a loaded
    // machine a GET slower than 500 ms is retried, and a pod would be read twice.
    let direct: Vec<Pod> = pods(&node, "direct", SEQUENTIAL + CONCURRENT)
        .into_iter()
        .map(|p| {
            let mut p = Pod::without_pod_cache(p);
            p.set_lookup_timeout(30);
            p
        })
        .collect();
    node.srv.clear_requests();
    start_all(&direct);
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for name in pod_gets(&node.srv) {
        *per_pod.entry(name).or_default() += 1;
    }
    assert_eq!(per_pod.len(), direct.len(), "{per_pod:?}");
    assert!(per_pod.values().all(|n| *n == 1), "{per_pod:?}");
    assert_rules(&direct, &want);
    assert!(
        matches!(spy.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the plugin connected to the cache socket with pod_cache false"
    );
    assert!(
        agent.log().contains("(api: pod cache disabled)"),
        "{}",
        agent.log()
    );
    agent.proc.child.kill().unwrap();
}

#[test]
fn cached_pods_start_through_an_api_outage_and_uncached_ones_fail_closed() {
    if !require_root() {
        return;
    }
    let node = Node::new(62);
    let agent = Agent::start(&node.srv, &node.dir.join("run"), NODE, &[]);
    let hung = node.bare_pod("cached-hung", 1);
    let stopped = node.bare_pod("cached-stopped", 2);
    agent.wait_synced();
    agent.wait_pods(2);
    let check = |p: &Pod, redirected: bool| {
        let rules = p.save("iptables-nft-save");
        assert_eq!(
            rules.contains("-A ISTIO_OUTPUT"),
            redirected,
            "{}: {rules}",
            p.name
        );
    };
    let fail_closed = |what: &str| {
        let mut p = node.pod_without_api_object(what);
        p.uid = "00000000-0000-4000-8000-00000000dead".into();
        let t = Instant::now();
        let out = p.add();
        let took = t.elapsed();
        assert_ne!(out.code, 0, "{what}: an uncached pod started: {out}");
        assert!(out.stdout.contains("unredirected"), "{out}");
        // The lookup deadline is 2 s; only a hang would take this long.
        assert!(took < Duration::from_secs(15), "{what}: {took:?}");
        check(&p, false);
    };

    // The API server accepts connections and never answers.
    node.srv.set_fault(Fault::Hang, None);
    hung.add().assert_success();
    check(&hung, true);
    fail_closed("uncached-hung");

    // The API server is gone.
    node.srv.stop();
    stopped.add().assert_success();
    check(&stopped, true);
    fail_closed("uncached-stopped");
    let log = agent.log();
    assert!(log.contains("pod cache: unknown; API server"), "{log}");
    assert!(log.matches("ms (cache)").count() >= 2, "{log}");
}

#[test]
fn a_pod_recreated_under_its_name_gets_the_new_pods_decision() {
    if !require_root() {
        return;
    }
    let node = Node::new(63);
    let agent = Agent::start(&node.srv, &node.dir.join("run"), NODE, &[]);
    // The old pod has no sidecar: its decision would be "no redirection".
    let old_uid = node.add_plain_pod("web");
    agent.wait_synced();
    agent.wait_pods(1);
    node.srv.delete_pod("default", "web").unwrap();
    let web = node.bare_pod("web", 3);
    assert_ne!(web.uid, old_uid);
    node.srv.clear_requests();
    let out = web.add();
    out.assert_success();
    let rules = web.save("iptables-nft-save");
    assert!(rules.contains("-A ISTIO_OUTPUT"), "{rules}\n{out}");
    assert!(out.stderr.contains("(cache)"), "{out}");
    assert_eq!(pod_gets(&node.srv), Vec::<String>::new());
}

/// The red team's P1: a StatefulSet's `web-0`, cached without a sidecar, is deleted and recreated with one
/// while the agent has no watch open; the re-opened watch answers at once but the server holds back what it
/// missed. The runtime passes no `K8S_POD_UID`: the ADD must not take the old pod from the cache (it does
/// not ask the cache at all).
#[test]
fn a_pod_recreated_in_a_watch_gap_starts_redirected_without_a_uid() {
    if !require_root() {
        return;
    }
    let node = Node::new(66);
    let agent = Agent::start(&node.srv, &node.dir.join("run"), NODE, &[]);
    let old_uid = node.add_plain_pod("web-0");
    agent.wait_synced();
    agent.wait_pods(1);
    // The watch ends and every re-watch is closed at once for now: a gap, in which web-0 is recreated.
    node.srv.set_fault(Fault::WatchClose, None);
    node.srv.end_watches();
    node.srv.delete_pod("default", "web-0").unwrap();
    let mut web = node.bare_pod("web-0", 6);
    assert_ne!(web.uid, old_uid);
    web.uid = String::new();
    // The next watch answers at once; its events wait until the fault is cleared.
    node.srv.set_fault(Fault::WatchHold, None);
    poll_until("a held watch", Duration::from_secs(60), || {
        node.srv.stats().watches_held >= 1
    });
    std::thread::sleep(Duration::from_millis(300));
    node.srv.clear_requests();
    let out = web.add();
    out.assert_success();
    let rules = web.save("iptables-nft-save");
    assert!(
        rules.contains("-A ISTIO_OUTPUT"),
        "web-0 started unredirected:\n{out}\n{rules}\n{}",
        agent.log()
    );
    assert!(out.stderr.contains("(api: cache miss: no_uid)"), "{out}");
    assert_eq!(pod_gets(&node.srv), vec!["web-0".to_string()]);
    node.srv.clear_fault();
}

#[test]
fn a_killed_agents_socket_sends_the_next_add_to_the_api_server() {
    if !require_root() {
        return;
    }
    let node = Node::new(64);
    let mut agent = Agent::start(&node.srv, &node.dir.join("run"), NODE, &[]);
    let first = node.bare_pod("first", 4);
    let second = node.bare_pod("second", 5);
    agent.wait_synced();
    agent.wait_pods(2);
    agent.proc.child.kill().unwrap();
    agent.proc.child.wait().unwrap();
    assert!(agent.socket().exists(), "SIGKILL leaves the socket file");
    node.srv.clear_requests();
    let out = first.add();
    out.assert_success();
    assert!(out.stderr.contains("(api: cache miss: refused)"), "{out}");
    assert_eq!(pod_gets(&node.srv), vec!["first".to_string()]);
    // The agent is gone entirely (the socket removed): the same.
    std::fs::remove_file(agent.socket()).unwrap();
    let out = second.add();
    out.assert_success();
    assert!(out.stderr.contains("(api: cache miss: no_socket)"), "{out}");
    for p in [&first, &second] {
        assert!(p.save("iptables-nft-save").contains("-A ISTIO_OUTPUT"));
    }
}

#[test]
fn nftables_pods_in_standalone_mode_start_through_the_cache() {
    if !require_root() {
        return;
    }
    let node = Node::new(65);
    let agent = Agent::start(
        &node.srv,
        &node.dir.join("run"),
        NODE,
        &[("CHAINED_CNI_PLUGIN", "false"), ("NATIVE_NFTABLES", "true")],
    );
    let standalone = agent.dir.join("conf/YYY-istio-cni.conf");
    poll_until("the standalone file", Duration::from_secs(10), || {
        standalone.exists()
    });
    let conf = std::fs::read_to_string(&standalone).unwrap();
    assert!(
        conf.contains("\"native_nftables\": true") && !conf.contains("pod_cache"),
        "{conf}"
    );
    let pods: Vec<Pod> = (0..5)
        .map(|i| {
            node.bare_pod(&format!("nft-{i}"), 10 + i)
                .with_conf(conf.clone())
        })
        .collect();
    agent.wait_synced();
    agent.wait_pods(5);
    node.srv.clear_requests();
    for p in &pods {
        let out = p.add();
        out.assert_success();
        assert!(out.stderr.contains("(cache)"), "{out}");
        let tables =
            p.ns.exec_ok(&["nft", "list", "table", "inet", "istio-proxy-nat"]);
        assert!(tables.contains("chain istio-output"), "{tables}");
    }
    assert_eq!(pod_gets(&node.srv), Vec::<String>::new());
    let m = agent.metrics_text();
    for series in [
        "istio_cni_pod_cache_lookups_total{result=\"hit\"} ",
        "istio_cni_pod_cache_pods 5",
        "istio_cni_pod_cache_watch_restarts_total ",
    ] {
        assert!(m.contains(series), "{series} missing:\n{m}");
    }
}

/// A lagging agent (its watch behind the kubelet's: a slow or HA API server, or a pod force-deleted with
/// `--grace-period=0 --force`, which never shows a `deletionTimestamp`) still holds `web-1`'s previous pod
/// when the StatefulSet's new `web-1` starts, and answers every lookup with it. The runtime passes no
/// `K8S_POD_UID`, so nothing in the answer tells the two pods apart: whether the old pod had no sidecar
/// (a skip) or had one with other `traffic.sidecar.istio.io/*` settings (an outbound range left out of
/// capture), the new pod must get the API server's pod, and the agent is not asked at all.
#[test]
fn a_lookup_without_a_uid_never_takes_the_pod_from_the_cache() {
    if !require_root() {
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let node = Node::new(67);
    let no_sidecar = concat!(
        r#"{"metadata":{"namespace":"default","name":"web-1","uid":"uid-of-the-old-pod","#,
        r#""resourceVersion":"1"},"spec":{"containers":[{"name":"app"}]}}"#
    )
    .to_string();
    let ip: std::net::IpAddr = "10.253.7.2".parse().unwrap();
    let other_ranges = Node::pod_object(
        "web-1",
        r#""traffic.sidecar.istio.io/excludeOutboundIPRanges":"10.77.0.0/16""#,
        "",
        &[ip],
    );
    for (case, old) in [("other ranges", other_ranges), ("no sidecar", no_sidecar)] {
        let mut web = node.bare_pod("web-1", 7);
        web.uid = String::new();
        // The lagging agent: answers every lookup with the old pod.
        let sock = node.dir.join("run/pod-cache.sock");
        let _ = std::fs::remove_file(&sock);
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        listener.set_nonblocking(true).unwrap();
        let old = istio_cni::json::parse_object(&old, "old pod").unwrap();
        let line = istio_cni::podcache::proto::hit_line(&istio_cni::json::object_to_compact(&old));
        let (stop, asked) = (AtomicBool::new(false), AtomicUsize::new(0));
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut c, _)) => {
                            c.set_nonblocking(false).unwrap();
                            let mut req = String::new();
                            let _ = BufReader::new(&c).read_line(&mut req);
                            let _ = c.write_all(&line);
                            asked.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
            node.srv.clear_requests();
            let out = web.add();
            stop.store(true, Ordering::Relaxed);
            out
        });
        out.assert_success();
        let rules = web.save("iptables-nft-save");
        assert!(
            rules.contains("-A ISTIO_OUTPUT") && !rules.contains("10.77.0.0/16"),
            "{case}: web-1 started with the old pod's settings from the lagging cache:\n{out}\n{rules}"
        );
        assert_eq!(
            asked.load(Ordering::Relaxed),
            0,
            "{case}: the agent was asked\n{out}"
        );
        assert!(
            out.stderr.contains("(api: cache miss: no_uid)"),
            "{case}: {out}"
        );
        assert_eq!(pod_gets(&node.srv), vec!["web-1".to_string()], "{case}");
        node.srv.delete_pod("default", "web-1").unwrap();
        let _ = std::fs::remove_file(&sock);
    }
}

/// The plugin asks the run dir's socket only when root (or its own user) serves it. A socket made by
/// another user (a run dir writable by others) answering a forged hit "no sidecar" for a pod that has one
/// would start that pod unredirected; the plugin reads the pod from the API server instead.
#[test]
fn a_pod_cache_socket_served_by_another_user_is_not_asked() {
    if !require_root() {
        return;
    }
    let node = Node::new(71);
    let run = node.dir.join("run");
    let pod = node.bare_pod("forged", 6);
    // The forger: uid/gid 65534, binding the socket in a run dir it may write.
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    std::fs::set_permissions(node.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = run.join("pod-cache.sock");
    let forged = format!(
        r#"{{"v":1,"result":"hit","pod":{{"metadata":{{"namespace":"{}","name":"{}","uid":"{}"}},"spec":{{"containers":[{{"name":"app"}}]}}}}}}"#,
        pod.namespace, pod.name, pod.uid
    );
    let script = "import socket,sys\n\
        s=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(8)\nprint('up',flush=True)\n\
        while True:\n  c,_=s.accept()\n  c.recv(4096)\n  c.sendall((sys.argv[2]+'\\n').encode())\n  c.close()\n";
    let mut forger = std::process::Command::new("python3")
        .args(["-c", script, sock.to_str().unwrap(), &forged])
        .uid(65534)
        .gid(65534)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut up = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(forger.stdout.take().unwrap()),
        &mut up,
    )
    .unwrap();
    assert_eq!(up.trim(), "up");
    node.srv.clear_requests();
    let out = pod.add();
    let _ = forger.kill();
    let _ = forger.wait();
    out.assert_success();
    assert!(
        pod.save("iptables-nft-save").contains("-A ISTIO_OUTPUT"),
        "the forged hit started the pod unredirected: {out}"
    );
    assert!(out.stderr.contains("served by uid 65534"), "{out}");
    assert!(
        out.stderr.contains("(api: cache miss: socket_error)"),
        "{out}"
    );
    assert_eq!(pod_gets(&node.srv), vec!["forged".to_string()]);
}
