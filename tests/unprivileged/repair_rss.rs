//! Memory stays flat: the agent watching a node with 1,000 realistically sized injected pods (20 of them
//! broken), through the initial paginated list, the label actions and a MODIFIED event for every pod.
//! Prints the agent's peak and current RSS (VmHWM / VmRSS) for 100 and for 1,000 pods; fails when the
//! peak grows with the pod count beyond a small margin: the repair worker keeps only broken pods, the
//! audit one small record per running sidecar pod (its facts and decision, about 1.2 KiB of heap with the
//! map's share), never a pod object (~8 KiB parsed).

use crate::support::repair::*;

/// An injected pod of realistic size (~7 KB of JSON: status annotation, proxy env, volumes, statuses).
pub fn pod(i: usize, broken: bool) -> String {
    let env: Vec<String> = (0..30)
        .map(|k| format!(r#"{{"name":"ISTIO_META_VAR_{k}","value":"value-{k}-{i}-abcdefghijklmnopqrstuvwxyz"}}"#))
        .collect();
    let vols: Vec<String> = (0..8)
        .map(|k| format!(r#"{{"name":"vol-{k}","emptyDir":{{"medium":"Memory"}}}}"#))
        .collect();
    let init_state = if broken {
        r#""state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off 5m0s restarting failed container"}},
           "lastState":{"terminated":{"exitCode":126,"reason":"Error","startedAt":"2026-11-22T03:00:00Z","finishedAt":"2026-11-22T03:00:05Z"}}"#
    } else {
        r#""state":{"terminated":{"exitCode":0,"reason":"Completed","startedAt":"2026-11-22T03:00:00Z","finishedAt":"2026-11-22T03:00:01Z"}},"lastState":{}"#
    };
    let status_ann = r#"{\"initContainers\":[\"istio-validation\"],\"containers\":[\"istio-proxy\"],\"volumes\":[\"workload-socket\",\"credential-socket\",\"workload-certs\",\"istio-envoy\",\"istio-data\",\"istio-podinfo\",\"istio-token\",\"istiod-ca-cert\"],\"imagePullSecrets\":null,\"revision\":\"default\"}"#;
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"app-{i}","namespace":"ns-{}","generateName":"app-",
        "labels":{{"app":"app-{i}","version":"v1","security.istio.io/tlsMode":"istio","service.istio.io/canonical-name":"app-{i}","pod-template-hash":"5d8f7c9b4"}},
        "annotations":{{"sidecar.istio.io/status":"{status_ann}","kubectl.kubernetes.io/default-container":"app","istio.io/rev":"default","prometheus.io/scrape":"true","prometheus.io/port":"15020","prometheus.io/path":"/stats/prometheus"}},
        "ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"app-5d8f7c9b4","uid":"6f1c2a9e-0000-4000-8000-{i:012}","controller":true,"blockOwnerDeletion":true}}]}},
        "spec":{{"nodeName":"{NODE}","serviceAccountName":"default","volumes":[{}],
          "initContainers":[{{"name":"istio-validation","image":"docker.io/istio/proxyv2:1.24.0","args":["istio-iptables","-p","15001","-z","15006","-u","1337","-m","REDIRECT","-i","*","-x","","-b","*","-d","15090,15021,15020","--log_output_level=default:info","--run-validation","--skip-rule-apply"]}}],
          "containers":[{{"name":"app","image":"example/app:1.0","ports":[{{"containerPort":8080,"protocol":"TCP"}}]}},
                        {{"name":"istio-proxy","image":"docker.io/istio/proxyv2:1.24.0","args":["proxy","sidecar","--domain","$(POD_NAMESPACE).svc.cluster.local"],"env":[{}]}}]}},
        "status":{{"phase":"Pending","podIP":"10.{}.{}.{}","hostIP":"192.168.1.10",
          "initContainerStatuses":[{{"name":"istio-validation",{init_state},"ready":false,"restartCount":3,"image":"docker.io/istio/proxyv2:1.24.0","imageID":"docker.io/istio/proxyv2@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","containerID":"containerd://{i:064}"}}],
          "containerStatuses":[{{"name":"app","state":{{"waiting":{{"reason":"PodInitializing"}}}},"lastState":{{}},"ready":false,"restartCount":0,"image":"example/app:1.0","imageID":""}},
                               {{"name":"istio-proxy","state":{{"waiting":{{"reason":"PodInitializing"}}}},"lastState":{{}},"ready":false,"restartCount":0,"image":"docker.io/istio/proxyv2:1.24.0","imageID":""}}]}}}}"#,
        i % 17,
        vols.join(","),
        env.join(","),
        100 + i / 65536,
        (i / 256) % 256,
        i % 256,
    )
}

pub fn status_kb(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} not in /proc/{pid}/status"))
}

/// CPU seconds the process `pid` has used (user + system; `/proc/<pid>/stat` counts in USER_HZ, which
/// Linux fixes at 100 for userspace on every architecture).
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3 (state); utime, stime are 14, 15.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// CPU seconds the agent may spend reaching a step (it needs well under 2 on an idle machine).
const CPU_BUDGET: f64 = 60.0;
/// Wall seconds the agent may go without using any CPU before it counts as stuck.
const STALL_SECS: u64 = 120;

/// Wall seconds a step may take at the most: a guard against a hang, not a bound on speed. An agent that
/// never hears of an event (a lost watch event) idles but for the audit's rounds, whose CPU defeats the
/// stall rule, and would otherwise wait until CI's own limit with nothing said.
const HANG_SECS: u64 = 1200;

/// Waits until `done`, bounded by the agent's progress rather than by wall time: fails when the agent has
/// spent [`CPU_BUDGET`] CPU seconds (busy but not getting there) or used no CPU at all for [`STALL_SECS`]
/// (stuck). A machine shared with other builds slows the agent down but does not fail this; a fixed wall
/// deadline (120 s) did when the agent's share of the CPU fell below a few percent. [`HANG_SECS`] of wall
/// time, far beyond any loaded machine's step, fails it too.
fn wait_on_agent(pid: u32, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = cpu_secs(pid);
    let began = std::time::Instant::now();
    let mut last = (start, began);
    loop {
        if done() {
            return Ok(());
        }
        let used = cpu_secs(pid);
        if began.elapsed() > std::time::Duration::from_secs(HANG_SECS) {
            return Err(format!(
                "not there after {HANG_SECS} s ({:.1} CPU s used): an event the agent never heard of?",
                used - start
            ));
        }
        if used - start > CPU_BUDGET {
            return Err(format!(
                "the agent spent {:.1} CPU s without getting there",
                used - start
            ));
        }
        if used > last.0 {
            last = (used, std::time::Instant::now());
        } else if last.1.elapsed() > std::time::Duration::from_secs(STALL_SECS) {
            return Err(format!(
                "the agent used no CPU for {STALL_SECS} s ({:.1} CPU s in all)",
                used - start
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs the agent on a node with `n` pods (`n / 50` broken), waits until they are labeled and every pod
/// has been modified once more; returns (VmHWM, VmRSS) in kB.
fn measure(n: usize) -> (u64, u64) {
    let api = Api::new("rss");
    let broken = n / 50;
    for i in 0..n {
        api.srv.add_pod(&pod(i, i % 50 == 0)).unwrap();
    }
    let port = free_port();
    let log = api.dir.join("agent.log");
    let mut child = api.spawn(
        &[
            format!("--repair-node-name={NODE}"),
            "--repair-label-pods=true".into(),
            format!("--monitoring-port={port}"),
            "--log-level=warn".into(),
        ],
        &log,
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    if let Err(e) = wait_on_agent(child.id(), || {
        metric(&scrape(port), "label", "success") == broken as u64
    }) {
        panic!(
            "{n} pods: labels not done: {e}\n{}\n{}",
            scrape(port),
            logs()
        );
    }
    // A MODIFIED event for every pod.
    let rv0 = api.srv.resource_version();
    for i in 0..n {
        api.srv
            .patch_pod(
                &format!("ns-{}", i % 17),
                &format!("app-{i}"),
                r#"{"metadata":{"annotations":{"touched":"yes"}}}"#,
            )
            .unwrap();
    }
    assert!(api.srv.resource_version() >= rv0 + n as u64);
    // A sentinel broken pod after all those changes: once it is labeled, the agent has consumed every
    // earlier event (one ordered watch stream, one FIFO to the worker).
    api.srv.add_pod(&pod(n, true)).unwrap();
    if let Err(e) = wait_on_agent(child.id(), || {
        metric(&scrape(port), "label", "success") == broken as u64 + 1
    }) {
        panic!(
            "{n} pods: sentinel not labeled: {e}\n{}\n{}",
            scrape(port),
            logs()
        );
    }
    let hwm = status_kb(child.id(), "VmHWM:");
    let rss = status_kb(child.id(), "VmRSS:");
    let _ = child.kill();
    let _ = child.wait();
    (hwm, rss)
}

#[test]
fn rss_stays_flat_from_100_to_1000_pods() {
    let (h100, r100) = measure(100);
    let (h1000, r1000) = measure(1000);
    eprintln!(
        "repair agent memory ({}): 100 pods: VmHWM {h100} kB, VmRSS {r100} kB; 1,000 pods: VmHWM {h1000} kB, VmRSS {r1000} kB",
        std::env::var("ISTIO_CNI_BIN").unwrap_or_else(|_| BIN.to_string())
    );
    // Flat: ten times the pods may not cost more than 2 MB of peak memory.
    assert!(
        h1000 <= h100 + 2048,
        "peak RSS grows with the pods: {h100} kB → {h1000} kB"
    );
}
