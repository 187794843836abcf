//! A real Prometheus for the monitoring kit's end-to-end test (`tests/root/monitoring_e2e.rs`): Debian's
//! `prometheus` on 127.0.0.1 at a free port, its storage in a temp dir, killed when dropped; its HTTP API;
//! and its configuration: the shipped scrape job with pod discovery replaced by a file of targets carrying
//! the `__meta_kubernetes_*` labels pod discovery gives.

use super::monitoring::{scrape_job, tool, yaml, ystr};
use serde_json::{json, Value as Json};
use serde_yaml::Value as Yaml;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A real Prometheus on 127.0.0.1, its storage in a temp dir; killed when dropped.
pub struct Prometheus {
    child: Child,
    pub port: u16,
    pub dir: super::TempDir,
    agent: ureq::Agent,
}

/// An HTTP answer: status and body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Prometheus {
    /// Starts `prometheus` with `config` (prometheus.yml text) and the files `files` ((name, text), written
    /// next to it), on a free port; waits (bounded) for `/-/ready`. Started again on another port should
    /// the one it was given be taken in between (free ports are found by binding and releasing).
    pub fn start(config: &str, files: &[(&str, &str)]) -> Prometheus {
        let mut dir = super::TempDir::new("prometheus");
        dir.write("prometheus.yml", config);
        for (name, text) in files {
            dir.write(name, text);
        }
        for attempt in 1.. {
            let port = super::free_port();
            let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
            let child = Command::new(tool("prometheus"))
                .arg(format!(
                    "--config.file={}",
                    dir.join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join(format!("data-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start prometheus");
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(20)))
                .build()
                .into();
            let mut p = Prometheus {
                child,
                port,
                dir,
                agent,
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(Some(st)) = p.child.try_wait() {
                    let log = p.log();
                    assert!(
                        log.contains("address already in use") && attempt < 5,
                        "prometheus exited ({st}):\n{log}"
                    );
                    break;
                }
                if p.get("/-/ready", &[]).is_some_and(|a| a.status == 200) {
                    return p;
                }
                assert!(
                    Instant::now() < deadline,
                    "prometheus not ready within 60 s:\n{}",
                    p.log()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            // Keep the temp dir for the next attempt (p's Drop has nothing left to stop).
            dir = std::mem::replace(&mut p.dir, super::TempDir::new("prometheus-spent"));
        }
        unreachable!()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` with `query` parameters; `None` when the connection fails.
    pub fn get(&self, path: &str, query: &[(&str, &str)]) -> Option<Answer> {
        let mut req = self
            .agent
            .get(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in query {
            req = req.query(*k, *v);
        }
        let mut resp = req.call().ok()?;
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().ok()?;
        Some(Answer { status, body })
    }

    /// GET an API path; its `data`, or a failure naming the error Prometheus gave.
    pub fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Json, String> {
        let a = self
            .get(path, query)
            .ok_or_else(|| format!("GET {path}: no answer"))?;
        let v: Json =
            serde_json::from_str(&a.body).map_err(|e| format!("GET {path}: {e}: {}", a.body))?;
        if a.status != 200 || v["status"] != "success" {
            return Err(format!(
                "GET {path} {query:?}: {} {}: {}",
                a.status, v["errorType"], v["error"]
            ));
        }
        Ok(v["data"].clone())
    }

    /// An instant query's result vector (or scalar as one sample), or the error.
    pub fn query(&self, expr: &str) -> Result<Vec<Json>, String> {
        let d = self.api("/api/v1/query", &[("query", expr)])?;
        match d["resultType"].as_str() {
            Some("vector") | Some("matrix") => {
                Ok(d["result"].as_array().cloned().unwrap_or_default())
            }
            Some("scalar") => Ok(vec![
                serde_json::json!({"metric": {}, "value": d["result"]}),
            ]),
            other => Err(format!("{expr}: unexpected result type {other:?}")),
        }
    }
}

/// A sample's value as a number (NaN when it is not one).
pub fn sample_value(s: &Json) -> f64 {
    s["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How long a test waits for Prometheus to see something (a bound, never a timing assertion).
pub const BOUND: Duration = Duration::from_secs(120);

/// A label name as Kubernetes discovery sanitizes it (`k8s-app` → `k8s_app`).
pub fn sanitize(k: &str) -> String {
    k.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// One file_sd target group: a pod's container port (at `addr`) on `node` as pod discovery reports it.
#[allow(clippy::too_many_arguments)]
pub fn sd_target(
    addr: &str,
    node: &str,
    ns: &str,
    pod: &str,
    phase: &str,
    labels: &[(String, String)],
    container: &str,
    port_name: &str,
) -> Json {
    let mut l = serde_json::Map::new();
    let mut set = |k: &str, v: &str| {
        l.insert(k.to_string(), Json::from(v));
    };
    set("__meta_kubernetes_namespace", ns);
    set("__meta_kubernetes_pod_name", pod);
    set("__meta_kubernetes_pod_node_name", node);
    set("__meta_kubernetes_pod_phase", phase);
    set("__meta_kubernetes_pod_ip", "127.0.0.1");
    set("__meta_kubernetes_pod_container_name", container);
    set("__meta_kubernetes_pod_container_port_name", port_name);
    set(
        "__meta_kubernetes_pod_container_port_number",
        addr.rsplit(':').next().unwrap(),
    );
    for (k, v) in labels {
        set(&format!("__meta_kubernetes_pod_label_{}", sanitize(k)), v);
        set(
            &format!("__meta_kubernetes_pod_labelpresent_{}", sanitize(k)),
            "true",
        );
    }
    json!({"targets": [addr], "labels": l})
}

/// prometheus.yml: 1 s scrapes and evaluations, the rules file, and the shipped job with its pod discovery
/// replaced by the file.
pub fn prometheus_config() -> String {
    let mut job = scrape_job();
    let m = job.as_mapping_mut().unwrap();
    let sd = m
        .remove("kubernetes_sd_configs")
        .expect("the job discovers pods");
    assert_eq!(ystr(&sd[0], "role"), "pod");
    m.insert(
        "file_sd_configs".into(),
        yaml("- files: [targets.json]\n  refresh_interval: 1s\n"),
    );
    let mut config = yaml(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n\
         rule_files: [rules.yaml]\n",
    );
    config
        .as_mapping_mut()
        .unwrap()
        .insert("scrape_configs".into(), Yaml::Sequence(vec![job]));
    serde_yaml::to_string(&config).unwrap()
}

/// The result of `expr`, polled until `ok` holds (bounded); the last result on failure.
pub fn poll_query(
    prom: &Prometheus,
    what: &str,
    expr: &str,
    ok: impl Fn(&[Json]) -> bool,
) -> Vec<Json> {
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let r = prom
            .query(expr)
            .unwrap_or_else(|e| panic!("{what}: {expr}: {e}"));
        if ok(&r) {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {expr}: not within {BOUND:?}; last result: {r:?}\n{}",
            prom.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The values of `label` in a query's result, sorted.
pub fn labels_of(r: &[Json], label: &str) -> Vec<String> {
    let mut v: Vec<String> = r
        .iter()
        .filter_map(|s| s["metric"][label].as_str().map(String::from))
        .collect();
    v.sort();
    v
}
