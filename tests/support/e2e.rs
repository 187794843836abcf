//! A node with pods for end-to-end tests: the "node" namespace, pod namespaces wired by Debian's `ptp` +
//! `host-local`, the HTTPS API double serving the pods, and our plugin exec'd like a runtime. Plus the
//! traffic helpers: listeners and connections created inside a namespace, `SO_ORIGINAL_DST`.

use super::*;
use kube_double::{Options, Server};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

pub struct Node {
    pub ns: Netns,
    pub dir: TempDir,
    pub plugins: PluginDir,
    pub srv: Server,
    idx: u8,
}

pub struct Pod<'a> {
    pub node: &'a Node,
    pub ns: Netns,
    pub name: String,
    pub ptp_result: Value,
    pub ip4: IpAddr,
    pub ip6: Option<Ipv6Addr>,
    /// `metadata.uid` the double gave the pod ("" when it has none): the runtime's `K8S_POD_UID`.
    pub uid: String,
    /// `metadata.namespace` (the runtime's `K8S_POD_NAMESPACE`): `default` unless made in another.
    pub namespace: String,
    conf: String,
}

impl Node {
    /// The index in the node's addresses (10.252.<idx>.1).
    pub fn idx(&self) -> u8 {
        self.idx
    }

    /// A node namespace with addresses 10.252.<idx>.1, .2 and fd00:252:<idx>::1 on its `lo` (destinations for
    /// the pods' outbound traffic), the API double and a run dir with the plugin's kubeconfig.
    pub fn new(idx: u8) -> Node {
        let ns = Netns::new("node");
        for a in [format!("10.252.{idx}.1/32"), format!("10.252.{idx}.2/32")] {
            ns.exec_ok(&["ip", "addr", "add", &a, "dev", "lo"]);
        }
        ns.exec_ok(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("fd00:252:{idx}::1/128"),
            "dev",
            "lo",
        ]);
        let dir = TempDir::new("node");
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let srv = Server::start(Options::default()).expect("start the API double");
        srv.write_kubeconfig(&dir.join("run/istio-cni-kubeconfig"))
            .unwrap();
        Node {
            ns,
            dir,
            plugins: PluginDir::new(),
            srv,
            idx,
        }
    }

    /// Runs another build of the plugin when `ADD_BIN` names one (the measurements compare builds).
    pub fn plugin_from_env(&self) {
        if let Ok(bin) = std::env::var("ADD_BIN") {
            let link = self.plugins.istio_cni();
            std::fs::remove_file(&link).unwrap();
            std::os::unix::fs::symlink(bin, &link).unwrap();
        }
    }

    /// Writes the iptables backend record the installer would write.
    pub fn record_backend(&self, name: &str) {
        std::fs::write(self.dir.join("run/iptables-backend"), format!("{name}\n")).unwrap();
    }

    /// Writes the record the installer writes for IPTABLES_NODE_BINARIES (the plugin then runs the node's
    /// iptables-restore and -save).
    pub fn record_node_binaries(&self) {
        std::fs::write(self.dir.join("run/iptables-node-binaries"), "true\n").unwrap();
    }

    fn conf(&self, prev: &Value) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"e2e","type":"istio-cni","cni_agent_run_dir":"{}",
               "exclude_namespaces":["kube-system"],"plugin_log_level":"debug","pod_lookup_timeout_seconds":2,
               "prevResult":{}}}"#,
            self.dir.join("run").display(),
            to_json(prev)
        )
    }

    pub fn pod_object(name: &str, annotations: &str, env: &str, ips: &[IpAddr]) -> String {
        Node::pod_object_in("default", name, annotations, env, ips)
    }

    /// [`Node::pod_object`] in namespace `namespace`.
    pub fn pod_object_in(
        namespace: &str,
        name: &str,
        annotations: &str,
        env: &str,
        ips: &[IpAddr],
    ) -> String {
        let sep = if annotations.is_empty() { "" } else { "," };
        // Unique across the tests running at once (each with its own API double, whose own UIDs start
        // over) and across test processes: the pod's cgroup is named after it, and two pods sharing a
        // cgroup make each other's namespace look like the pod's.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let uid = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let ips_json: Vec<String> = ips.iter().map(|i| format!(r#"{{"ip":"{i}"}}"#)).collect();
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{namespace}","uid":"{uid}",
               "annotations":{{"sidecar.istio.io/status":"{{}}"{sep}{annotations}}}}},
               "spec":{{"nodeName":"node1","containers":[{{"name":"app"}},{{"name":"istio-proxy",
               "args":["proxy","sidecar"],"env":[{env}]}}]}},
               "status":{{"podIP":"{}","podIPs":[{}]}}}}"#,
            ips[0],
            ips_json.join(",")
        )
    }

    /// A pod wired by ptp + host-local (IPv4, and IPv6 when `dual_stack`), served by the API double.
    pub fn pod(&self, name: &str, annotations: &str, env: &str, dual_stack: bool) -> Pod<'_> {
        self.pod_in_namespace("default", name, annotations, env, dual_stack)
    }

    /// [`Node::pod`] in namespace `namespace` (its object in the double, the runtime's `K8S_POD_NAMESPACE`).
    pub fn pod_in_namespace(
        &self,
        namespace: &str,
        name: &str,
        annotations: &str,
        env: &str,
        dual_stack: bool,
    ) -> Pod<'_> {
        let ns = Netns::new("pod");
        let idx = self.idx;
        let v6 = if dual_stack {
            format!(r#",[{{"subnet":"fd00:251:{idx}::/64"}}]"#)
        } else {
            String::new()
        };
        let routes = if dual_stack {
            r#"[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]"#
        } else {
            r#"[{"dst":"0.0.0.0/0"}]"#
        };
        let ptp_conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"e2e","type":"ptp","ipMasq":false,
               "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.251.{idx}.0/24"}}]{v6}],
               "routes":{routes}}}}}"#,
            self.dir.join("ipam").display()
        );
        let env_add = CniEnv::new("ADD", name, &ns.path(), &self.plugins.cni_path());
        let out = run_plugin_in(
            &self.ns,
            &debian_plugin("ptp"),
            &env_add,
            ptp_conf.as_bytes(),
        );
        out.assert_success();
        let result = out.json();
        let ips = result_ips(&result);
        let ip4 = *ips
            .iter()
            .find(|i| i.is_ipv4())
            .expect("ptp gave no IPv4 address");
        let ip6 = ips.iter().find_map(|i| match i {
            IpAddr::V6(a) => Some(*a),
            _ => None,
        });
        if ip6.is_some() {
            wait_for_ipv6(&ns);
        }
        let stored = self
            .srv
            .add_pod(&Node::pod_object_in(
                namespace,
                name,
                annotations,
                env,
                &ips,
            ))
            .expect("add pod to the double");
        let mut p = self.pod_in(ns, name, result, ip4, ip6);
        p.uid = uid_of(&stored);
        p.namespace = namespace.into();
        p
    }

    /// The pod in `ns` that `result` (its plugin chain's result) describes, with this node's plugin conf.
    fn pod_in(
        &self,
        ns: Netns,
        name: &str,
        result: Value,
        ip4: IpAddr,
        ip6: Option<Ipv6Addr>,
    ) -> Pod<'_> {
        let conf = self.conf(&result);
        Pod {
            node: self,
            ns,
            name: name.into(),
            ptp_result: result,
            ip4,
            ip6,
            uid: String::new(),
            namespace: "default".into(),
            conf,
        }
    }

    /// A pod namespace with no interfaces but `lo`, holding 10.253.<i>.2/24 (the address IPv6 is decided
    /// from, as upstream does inside the namespace), and a prevResult naming it (enough to program rules:
    /// nothing sends traffic). Served by the double.
    pub fn bare_pod(&self, name: &str, i: u8) -> Pod<'_> {
        self.bare_pod_with(name, i, "", "")
    }

    /// [`Node::bare_pod`] with these annotations and istio-proxy env entries (JSON fragments).
    pub fn bare_pod_with(&self, name: &str, i: u8, annotations: &str, env: &str) -> Pod<'_> {
        let mut p = self.pod_without_api_object_at(name, i);
        let stored = self
            .srv
            .add_pod(&Node::pod_object(name, annotations, env, &[p.ip4]))
            .expect("add pod");
        p.uid = uid_of(&stored);
        p
    }

    /// Like [`Node::bare_pod`] but the API has no such pod.
    pub fn pod_without_api_object(&self, name: &str) -> Pod<'_> {
        self.pod_without_api_object_at(name, 250)
    }

    fn pod_without_api_object_at(&self, name: &str, i: u8) -> Pod<'_> {
        let ns = Netns::new("bare");
        let ip4: IpAddr = format!("10.253.{i}.2").parse().unwrap();
        ns.exec_ok(&["ip", "addr", "add", &format!("{ip4}/24"), "dev", "lo"]);
        let result = parse_json(&format!(
            r#"{{"cniVersion":"1.0.0","interfaces":[{{"name":"eth0","sandbox":"{}"}}],"ips":[{{"address":"{ip4}/24","interface":0}}]}}"#,
            ns.path()
        ));
        self.pod_in(ns, name, result, ip4, None)
    }

    /// A pod without a sidecar (`app` only), served by the double; returns its UID.
    pub fn add_plain_pod(&self, name: &str) -> String {
        let stored = self
            .srv
            .add_pod(&format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},
                   "spec":{{"nodeName":"node1","containers":[{{"name":"app"}}]}}}}"#
            ))
            .expect("add pod");
        uid_of(&stored)
    }

    /// The node-side address the pod's traffic comes from / goes to (ptp's gateway).
    pub fn gw4(&self, pod: &Pod) -> IpAddr {
        let o = match &pod.ptp_result {
            Value::Object(o) => o,
            _ => panic!("result is not an object"),
        };
        match o.get("ips") {
            Some(Value::Array(a)) => a
                .iter()
                .find_map(|ip| match ip {
                    Value::Object(ip) => match ip.get("gateway") {
                        Some(Value::String(g)) => g.parse::<IpAddr>().ok().filter(|g| g.is_ipv4()),
                        _ => None,
                    },
                    _ => None,
                })
                .expect("no IPv4 gateway in the ptp result"),
            _ => panic!("no ips in the ptp result"),
        }
    }
}

/// The rule backend a test's pods use: iptables mode, or nftables mode (`native_nftables: true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
}

impl Backend {
    /// `node`'s pod ([`Node::pod`]) in this backend's mode.
    pub fn pod<'a>(self, node: &'a Node, name: &str, ann: &str, env: &str, v6: bool) -> Pod<'a> {
        let pod = node.pod(name, ann, env, v6);
        match self {
            Backend::Iptables => pod,
            Backend::Nftables => pod.with_native_nftables(),
        }
    }
}

impl Pod<'_> {
    /// The environment a runtime gives the plugin for `command` on this pod.
    fn cni_env(&self, command: &str) -> CniEnv {
        CniEnv::new(
            command,
            &self.name,
            &self.ns.path(),
            &self.node.plugins.cni_path(),
        )
        .with_args(&format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}{}",
            self.namespace,
            self.name,
            if self.uid.is_empty() {
                String::new()
            } else {
                format!(";K8S_POD_UID={}", self.uid)
            }
        ))
    }

    /// Runs our plugin for `command` on this pod, as a runtime does.
    pub fn run(&self, command: &str) -> PluginOutput {
        let env = self.cni_env(command);
        run_plugin(
            &self.node.plugins.istio_cni(),
            "istio-cni",
            &env,
            self.conf.as_bytes(),
        )
    }

    /// Runs `cmd` (a plugin, maybe wrapped) with this pod's environment for `command` and its conf.
    pub fn run_wrapped(&self, cmd: std::process::Command, command: &str) -> PluginOutput {
        run_cmd(cmd, &self.cni_env(command), self.conf.as_bytes())
    }

    /// ADD for measurements: the exit code and the wall time from spawn to exit, waited for without
    /// polling (output discarded; no timeout).
    pub fn add_timed(&self) -> (i32, Duration) {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut cmd = Command::new(self.node.plugins.istio_cni());
        cmd.env_clear()
            .env("PATH", PLUGIN_PATH_ENV)
            .envs(self.cni_env("ADD").vars())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t = Instant::now();
        let mut child = cmd.spawn().expect("exec the plugin");
        let mut sin = child.stdin.take().unwrap();
        let _ = sin.write_all(self.conf.as_bytes());
        drop(sin);
        let status = child.wait().expect("wait for the plugin");
        (status.code().unwrap_or(-1), t.elapsed())
    }

    /// ADD with the node's `/etc/nsswitch.conf` replaced (in a private mount namespace) by `nsswitch`.
    pub fn add_with_nsswitch(&self, nsswitch: &str) -> PluginOutput {
        let conf = self.node.dir.write("nsswitch.conf", nsswitch);
        let env = self.cni_env("ADD");
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            r#"mount --bind "$1" /etc/nsswitch.conf && exec "$2""#,
            "sh",
        ])
        .arg(conf)
        .arg(self.node.plugins.istio_cni());
        run_cmd(cmd, &env, self.conf.as_bytes())
    }

    pub fn add(&self) -> PluginOutput {
        self.run("ADD")
    }

    /// This pod's configuration with `pod_lookup_timeout_seconds` set to `secs` (the node's is 2).
    pub fn set_lookup_timeout(&mut self, secs: u32) {
        self.conf = self.conf.replace(
            r#""pod_lookup_timeout_seconds":2"#,
            &format!(r#""pod_lookup_timeout_seconds":{secs}"#),
        );
    }

    /// The same pod with the plugin reading its kubeconfig (and backend record) from `run_dir`, where an
    /// installer under test wrote them.
    pub fn with_agent_run_dir(mut self, run_dir: &std::path::Path) -> Self {
        let ours = format!(
            r#""cni_agent_run_dir":"{}""#,
            self.node.dir.join("run").display()
        );
        assert!(self.conf.contains(&ours), "{}", self.conf);
        self.conf = self.conf.replacen(
            &ours,
            &format!(r#""cni_agent_run_dir":"{}""#, run_dir.display()),
            1,
        );
        self
    }

    /// The same pod with `native_nftables: true` in its network configuration.
    pub fn with_native_nftables(mut self) -> Self {
        self.conf = self.conf.replacen(
            r#""type":"istio-cni""#,
            r#""type":"istio-cni","native_nftables":true"#,
            1,
        );
        assert!(self.conf.contains("native_nftables"), "{}", self.conf);
        self
    }

    /// The same pod with `"pod_cache": false` in its network configuration (what the installer writes
    /// with `POD_CACHE_ENABLED=false`).
    pub fn without_pod_cache(mut self) -> Self {
        self.conf = self.conf.replacen(
            r#""type":"istio-cni""#,
            r#""type":"istio-cni","pod_cache":false"#,
            1,
        );
        self
    }

    /// The same pod with `conf` as its whole network configuration (e.g. the file the installer wrote).
    pub fn with_conf(mut self, conf: String) -> Self {
        self.conf = conf;
        self
    }

    /// `prog` (an iptables-save) inside the pod, without comments and counters.
    pub fn save(&self, prog: &str) -> String {
        self.ns.saved_rules(prog)
    }
}

fn uid_of(pod: &miniserde::json::Object) -> String {
    match pod.get("metadata") {
        Some(Value::Object(m)) => match m.get("uid") {
            Some(Value::String(u)) => u.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

fn result_ips(result: &Value) -> Vec<IpAddr> {
    let mut out = Vec::new();
    if let Value::Object(o) = result {
        if let Some(Value::Array(a)) = o.get("ips") {
            for ip in a {
                if let Value::Object(ip) = ip {
                    if let Some(Value::String(addr)) = ip.get("address") {
                        if let Some(a) = addr.split('/').next().and_then(|a| a.parse().ok()) {
                            out.push(a);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Waits (bounded) until no IPv6 address in `ns` is still tentative (duplicate address detection).
fn wait_for_ipv6(ns: &Netns) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !ns.exec_ok(&["ip", "-6", "addr"]).contains("tentative") {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A listening socket created inside the namespace at `ns_path` (sockets keep their namespace).
pub fn listen_in(ns_path: &str, addr: SocketAddr, transparent: bool) -> TcpListener {
    let l = istio_cni::netns::run_in(ns_path, move || {
        let fam = if addr.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let fd: OwnedFd = socket::socket(fam, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| istio_cni::Error::other(format!("socket: {e}")))?;
        socket::setsockopt(&fd, sockopt::ReuseAddr, &true)
            .map_err(|e| istio_cni::Error::other(e.to_string()))?;
        if transparent {
            socket::setsockopt(&fd, sockopt::IpTransparent, &true)
                .map_err(|e| istio_cni::Error::other(format!("IP_TRANSPARENT: {e}")))?;
        }
        // A listener this test closed a moment ago may still be open in a child another test thread
        // forked and has not yet exec'd (CLOEXEC closes it only at exec): EADDRINUSE for that moment.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match socket::bind(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                &SockaddrStorage::from(addr),
            ) {
                Ok(()) => break,
                Err(nix::errno::Errno::EADDRINUSE) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(istio_cni::Error::other(format!("bind {addr}: {e}"))),
            }
        }
        socket::listen(&fd, socket::Backlog::new(64).unwrap())
            .map_err(|e| istio_cni::Error::other(format!("listen: {e}")))?;
        Ok(TcpListener::from(fd))
    })
    .unwrap_or_else(|e| panic!("listen on {addr} in {ns_path}: {e}"));
    l.set_nonblocking(true).unwrap();
    l
}

/// Connects from inside the namespace at `ns_path`, optionally as file-system uid/gid `fsuid` (what
/// `-m owner` matches), with a bounded timeout.
pub fn connect_from(
    ns_path: &str,
    to: SocketAddr,
    fsuid: Option<u32>,
) -> std::io::Result<TcpStream> {
    istio_cni::netns::run_in(ns_path, move || {
        if let Some(u) = fsuid {
            // Per-thread credentials: only this short-lived thread's new socket is owned by `u`.
            nix::unistd::setfsgid(nix::unistd::Gid::from_raw(u));
            nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u));
        }
        TcpStream::connect_timeout(&to, Duration::from_secs(3))
            .map_err(|e| istio_cni::Error::io(format!("connect {to}"), e))
    })
    .map_err(|e| std::io::Error::other(e.to_string()))
}

fn accept_for(l: &TcpListener, d: Duration) -> Option<TcpStream> {
    let deadline = Instant::now() + d;
    loop {
        match l.accept() {
            Ok((s, _)) => return Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => return None,
        }
    }
}

/// A connection accepted within a few seconds, if any.
pub fn accept_within(l: &TcpListener) -> Option<TcpStream> {
    accept_for(l, Duration::from_secs(5))
}

/// Checks that nothing arrives (short wait, used after a connection already landed elsewhere).
pub fn accept_within_short(l: &TcpListener) -> Option<TcpStream> {
    accept_for(l, Duration::from_millis(200))
}

/// `SO_ORIGINAL_DST` of an accepted, redirected connection.
pub fn original_dst(s: &TcpStream) -> SocketAddr {
    if s.local_addr().unwrap().is_ipv4() {
        let a = socket::getsockopt(s, sockopt::OriginalDst).expect("SO_ORIGINAL_DST");
        SocketAddr::new(
            IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
            u16::from_be(a.sin_port),
        )
    } else {
        let a = socket::getsockopt(s, sockopt::Ip6tOriginalDst).expect("IP6T_SO_ORIGINAL_DST");
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
            u16::from_be(a.sin6_port),
        )
    }
}
