//! `ISTIO_CNI_HOST_ROOT`: the installer and repair agent run the node's iptables from a scratch image
//! through the node's own dynamic loader (no chroot: upstream's chart drops SYS_CHROOT). Here the "node
//! root" is `/proc/self/root`, standing for a container's `/host/proc/1/root`. Its own test binary: it sets
//! a process-wide variable. Root only. Below, the node's tools started with another user on the machine
//! (H2): the agent runs as a separate process (this binary again), the attacker as `nobody`.

mod support;

use istio_cni::iptables::apply::{apply, Addresses, Plan};
use istio_cni::iptables::{backend, tool, Backend};
use istio_cni::netfilter::Family;
use istio_cni::netfilter::Outcome;
use support::{conformance_dir, require_root, Netns};

#[test]
fn iptables_run_from_the_host_root_through_its_loader() {
    if !require_root() {
        return;
    }
    std::env::set_var(tool::HOST_ROOT_ENV, "/proc/self/root");
    let t = tool::find("iptables-nft-restore").expect("found under the host root");
    assert_eq!(
        t.root.as_deref(),
        Some(std::path::Path::new("/proc/self/root"))
    );
    assert!(
        t.path.starts_with("/usr") || t.path.starts_with("/sbin"),
        "{:?}",
        t.path
    );
    assert!(backend::detect_host().is_ok());

    let ns = Netns::new("hostroot");
    let doc = std::fs::read_to_string(conformance_dir().join("pod/basic/expected.rules")).unwrap();
    let plan = Plan {
        docs: vec![(Family::V4, doc)],
        tproxy: None,
        ipv6_passthrough: false,
    };
    let io = istio_cni::iptables::Io {
        backend: Backend::Nft,
        node_binaries: true,
    };
    let r = apply(&ns.path(), io, move |_: &Addresses| Ok(plan)).unwrap();
    assert_eq!(r.families[0].1, Outcome::Applied);
    assert!(ns.exec_ok(&["iptables-nft-save"]).contains(":ISTIO_OUTPUT"));

    std::env::set_var(tool::HOST_ROOT_ENV, "/nonexistent-root");
    let e = backend::require(Backend::Nft, Family::V4, "restore")
        .unwrap_err()
        .to_string();
    assert!(e.contains("under the host root /nonexistent-root"), "{e}");
    tool::release();
}

// ---- H2: the node's tools cannot be swapped by another user, and get only the environment we choose ----

use std::path::PathBuf;
use std::process::{Command, Stdio};
use support::hostile;

/// The agent process of the tests below (this test binary run again with `HOST_TOOLS_AGENT` set, so that
/// its environment, pid and temp dir are its own): `race` execs `HOST_TOOLS_TOOL` `HOST_TOOLS_RUNS` times
/// once `HOST_TOOLS_READY` exists; `env` writes the environment `env` (run as a node tool) sees to
/// `HOST_TOOLS_OUT`. Not a test by itself.
#[test]
#[ignore = "the agent half of the host-tools tests; they run it"]
fn agent_half() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    match var("HOST_TOOLS_AGENT").as_str() {
        "race" => {
            let ready = PathBuf::from(var("HOST_TOOLS_READY"));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !ready.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(ready.exists(), "the attacker never got ready");
            let mut genuine = 0;
            for _ in 0..var("HOST_TOOLS_RUNS").parse::<usize>().unwrap() {
                let mut t = tool::find(&var("HOST_TOOLS_TOOL")).expect("the node's tool");
                if var("HOST_TOOLS_NAMING") == "link" {
                    // What a loader without --argv0 (glibc < 2.33, musl) gets.
                    match &mut t.launch {
                        tool::Launch::Loader { naming, .. } => *naming = tool::Naming::PrivateLink,
                        other => panic!("not run through the loader: {other:?}"),
                    }
                }
                let out = t.command().unwrap().arg("--version").output().unwrap();
                // The real applet, under its own name.
                let want = format!("{} v", var("HOST_TOOLS_TOOL"));
                genuine += String::from_utf8_lossy(&out.stdout).starts_with(&want) as usize;
            }
            std::fs::write(var("HOST_TOOLS_OUT"), genuine.to_string()).unwrap();
            // As every applet does when it ends (cli::main).
            tool::release();
        }
        "env" => {
            let t = tool::find("env").expect("env");
            let out = t.command().unwrap().stdin(Stdio::null()).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            std::fs::write(var("HOST_TOOLS_OUT"), &out.stdout).unwrap();
        }
        other => panic!("HOST_TOOLS_AGENT={other:?}: run by the host-tools tests only"),
    }
}

/// The agent: this binary's `agent_half`, with exactly `env`.
fn agent(env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["agent_half", "--exact", "--ignored", "--quiet"])
        .env_clear()
        .env("PATH", support::PLUGIN_PATH_ENV)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    c
}

/// Runs the agent (`runs` execs of the node's iptables-nft-save under the host root, its temp dir a
/// world-writable directory) against the attacker running as `nobody`; returns the evil program's runs
/// as root and the runs of the genuine tool.
fn race(tag: &str, runs: usize, extra: &[(&str, &str)]) -> (usize, usize) {
    let pid = std::process::id();
    let bins = hostile::dir_with_mode(
        &std::env::temp_dir().join(format!("h2-bin-{pid}-{tag}")),
        0o755,
    );
    let marker = bins.join("marker");
    let evil = hostile::evil(&bins, &marker);
    let attacker = hostile::attacker(&bins);
    let base = hostile::dir_with_mode(
        &std::env::temp_dir().join(format!("h2-tmp-{pid}-{tag}")),
        0o777,
    );
    let ready = base.join("ready");
    let out = bins.join("genuine");
    let out_s = out.display().to_string();
    let (runs_s, base_s, ready_s) = (
        runs.to_string(),
        base.display().to_string(),
        ready.display().to_string(),
    );
    let mut env = vec![
        ("HOST_TOOLS_AGENT", "race"),
        ("HOST_TOOLS_RUNS", runs_s.as_str()),
        ("HOST_TOOLS_READY", ready_s.as_str()),
        ("HOST_TOOLS_TOOL", "iptables-nft-save"),
        ("HOST_TOOLS_OUT", out_s.as_str()),
        (tool::HOST_ROOT_ENV, "/proc/self/root"),
        ("TMPDIR", base_s.as_str()),
    ];
    env.extend_from_slice(extra);
    let mut agent = agent(&env).stdout(Stdio::null()).spawn().unwrap();
    use std::os::unix::process::CommandExt;
    let mut attack = Command::new(&attacker)
        .arg(&base)
        .arg(agent.id().to_string())
        .arg("iptables-nft-save")
        .arg(&evil)
        .arg(&ready)
        .uid(hostile::NOBODY)
        .gid(hostile::NOBODY)
        .env_clear()
        .current_dir("/")
        .spawn()
        .unwrap();
    let status = agent.wait().unwrap();
    let _ = attack.kill();
    let _ = attack.wait();
    assert!(status.success(), "the agent failed: {status}");
    let as_root = hostile::lines(&marker)
        .iter()
        .filter(|l| *l == "uid=0")
        .count();
    let genuine = std::fs::read_to_string(&out).unwrap().parse().unwrap();
    // The agent left nothing of its own behind (the attacker's directories are not its own; one the
    // attacker renamed away stays where it was put, emptied).
    let left: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == 0);
            ours && std::fs::read_dir(e.path()).map_or(true, |mut d| d.next().is_some())
        })
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&bins);
    assert!(left.is_empty(), "{tag}: the agent left {left:?}");
    (as_root, genuine)
}

/// H2: an unprivileged user who pre-creates or swaps what the agent hands the node's loader never gets a
/// program run as root. Before the fix (a link in `$TMPDIR/istio-cni-host-tools-<pid>/`) the attacker's
/// program ran as uid 0 in nearly every exec.
#[test]
fn an_unprivileged_user_cannot_swap_the_node_tool_the_agent_runs() {
    if !require_root() {
        return;
    }
    const RUNS: usize = 100;
    // This node's loader has --argv0; the link is what older loaders get.
    for naming in ["default", "link"] {
        let (won, genuine) = race(naming, RUNS, &[("HOST_TOOLS_NAMING", naming)]);
        eprintln!(
            "H2 race ({naming}): the attacker's program ran as root {won} times in {RUNS} execs; the genuine tool {genuine}"
        );
        assert_eq!(
            won, 0,
            "{naming}: the attacker's program ran as root {won}/{RUNS} times"
        );
        assert_eq!(
            genuine, RUNS,
            "{naming}: the node's tool ran {genuine}/{RUNS} times"
        );
    }
}

/// What `env` run as a node tool by an agent whose environment holds `vars` sees, and the processes the
/// `LD_PRELOAD`/`LD_AUDIT` recorder library was loaded into besides the agent itself.
fn child_environment(root: Option<&str>, vars: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
    let pid = std::process::id();
    let dir = hostile::dir_with_mode(
        &std::env::temp_dir().join(format!("h2-env-{pid}-{}", root.is_some())),
        0o755,
    );
    let marker = dir.join("marker");
    let lib = hostile::recorder(&dir, &marker);
    let out = dir.join("env.out");
    let (lib_s, out_s) = (lib.display().to_string(), out.display().to_string());
    let mut env = vec![
        ("HOST_TOOLS_AGENT", "env"),
        ("HOST_TOOLS_OUT", out_s.as_str()),
        ("LD_PRELOAD", lib_s.as_str()),
        ("LD_AUDIT", lib_s.as_str()),
    ];
    if let Some(r) = root {
        env.push((tool::HOST_ROOT_ENV, r));
    }
    env.extend_from_slice(vars);
    let o = agent(&env).output().unwrap();
    assert!(o.status.success(), "agent: {o:?}");
    let seen = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let me = std::env::current_exe().unwrap();
    let others = hostile::lines(&marker)
        .into_iter()
        .filter(|l| !l.ends_with(&*me.to_string_lossy()))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (seen, others)
}

/// H2: the node's iptables get an allow-listed environment (PATH and the xtables variables we set), so
/// `LD_PRELOAD`, `LD_AUDIT` and the other loader/libc knobs in the agent's environment never reach them,
/// whether run directly (on PATH) or through the node's loader (under a host root).
#[test]
fn loader_and_libc_variables_never_reach_the_node_tools() {
    if !require_root() {
        return;
    }
    let hostile_vars = [
        ("LD_LIBRARY_PATH", "/nonexistent-lib"),
        ("LD_PROFILE", "libc.so.6"),
        ("GCONV_PATH", "/nonexistent-gconv"),
        ("MALLOC_ARENA_MAX", "1"),
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=1"),
        ("HOSTALIASES", "/nonexistent-hosts"),
        ("LOCALDOMAIN", "example.invalid"),
        ("RES_OPTIONS", "ndots:9"),
        ("NLSPATH", "/nonexistent-nls"),
        ("XTABLES_LIBDIR", "/nonexistent-xtables"),
        ("SOME_SECRET", "1"),
    ];
    for root in [None, Some("/proc/self/root")] {
        let (seen, loaded_into) = child_environment(root, &hostile_vars);
        // Only PATH, and XTABLES_LIBDIR when it is ours (the node's module directory under the root).
        let leaked: Vec<&String> = seen
            .iter()
            .filter(|l| {
                let ours = root.is_some() && l.starts_with("XTABLES_LIBDIR=/proc/self/root/");
                !(l.starts_with("PATH=") || ours)
            })
            .collect();
        assert!(
            leaked.is_empty() && loaded_into.is_empty(),
            "root {root:?}: the node tool saw {leaked:?}; the recorder library ran in {loaded_into:?}"
        );
        // Ours is there: the node's modules (a container has none of its own at iptables' default path).
        assert_eq!(
            seen.iter()
                .any(|l| l.starts_with("XTABLES_LIBDIR=/proc/self/root/")),
            root.is_some(),
            "root {root:?}: {seen:?}"
        );
        assert!(
            seen.iter().any(|l| l.starts_with("PATH=")),
            "root {root:?}: no PATH: {seen:?}"
        );
    }
}
