//! `install-cni`'s run once its settings are resolved ([`super::main`]): start the servers and the log
//! relay, run the loop, clean up on SIGTERM/SIGINT. Signals are blocked in every thread and read through a signalfd, so the first one
//! ends the loop and later ones cannot interrupt the cleanup half-way.

use super::node::relay;
use super::node::server::{self, Endpoints, State};
use super::run::watch::{Role, Watcher};
use super::run::{self, End};
use super::settings::options::Settings;
use super::steps::Installer;
use crate::error::{Context, IoContext, Result};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts) and reads them through a signalfd.
pub fn block_signals() -> Result<SignalFd> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
        .map_err(|e| crate::Error::io("block SIGTERM/SIGINT", e.into()))?;
    SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| crate::Error::io("signalfd", e.into()))
}

fn self_exe() -> Result<PathBuf> {
    // Read through the /proc link, so an upgraded file on disk does not matter.
    let p = PathBuf::from("/proc/self/exe");
    std::fs::metadata(&p).io_context(|| "stat /proc/self/exe".to_string())?;
    Ok(p)
}

pub fn watcher_for(inst: &Installer) -> Result<Watcher> {
    let kubeconfig = crate::rundir::RunDir::KUBECONFIG;
    let mut w = Watcher::new(Box::new(move |role, name: &str| {
        if crate::fsutil::temp_owner(name).is_some() {
            return false;
        }
        match role {
            Role::BinDir => name == super::steps::PLUGIN_BINARY,
            Role::RunDir => name == kubeconfig,
            Role::ConfDir | Role::ServiceAccount => true,
        }
    }))?;
    let s = inst.settings();
    w.add(&s.mounted_cni_net_dir, Role::ConfDir)
        .context("create CNI config file")?;
    if let Err(e) = w.add(&s.service_account_dir, Role::ServiceAccount) {
        log::warn!("token rotation will not be noticed: {e}");
    }
    w.add(&s.run_dir, Role::RunDir)?;
    for d in super::steps::binaries::target_dirs(&s.bin_dir, s.secondary_bin_dir.as_deref()) {
        if let Err(e) = w.add(&d, Role::BinDir) {
            log::warn!("binary removal will not be noticed: {e}");
        }
    }
    Ok(w)
}

/// A directory we may create: there already, or its nearest existing ancestor is a directory.
fn creatable(what: &str, d: &Path) -> Result<()> {
    let mut p = d;
    loop {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(crate::Error::config(format!(
                    "{what} {}: {} is not a directory",
                    d.display(),
                    p.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match p.parent() {
                Some(up) => p = up,
                None => return Ok(()),
            },
            Err(e) => return Err(crate::Error::io(format!("{what} {}", d.display()), e)),
        }
    }
}

/// A directory that must be there.
fn existing(what: &str, d: &Path) -> Result<()> {
    match std::fs::metadata(d) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(crate::Error::config(format!(
            "{what} {} is not a directory",
            d.display()
        ))),
        Err(e) => Err(crate::Error::io(format!("{what} {}", d.display()), e)),
    }
}

/// Everything that can be checked before the first write, so that a start that fails leaves nothing
/// behind: the directories we write into (a one-shot run, which cannot wait for it, needs the conf dir
/// to exist: a missing one is a wrong path, not one to create) and the kubeconfig's inputs.
pub fn preflight(inst: &Installer) -> Result<()> {
    let s = inst.settings();
    let conf = "conf dir (MOUNTED_CNI_NET_DIR)";
    if s.once {
        existing(conf, &s.mounted_cni_net_dir)?;
    } else {
        creatable(conf, &s.mounted_cni_net_dir)?;
    }
    creatable("run dir (CNI_AGENT_RUN_DIR)", &s.run_dir)?;
    if !s.uninstall {
        existing("bin dir (CNI_BIN_DIR)", &s.bin_dir)?;
        inst.kubeconfig_text().context("kubeconfig")?;
    }
    Ok(())
}

/// Installs and keeps the installation until a signal (or, `--once`, one pass); cleans up.
pub fn serve(settings: Settings, sigfd: SignalFd) -> Result<i32> {
    let mut inst = Installer::new(settings, self_exe()?);
    preflight(&inst)?;
    if inst.settings().uninstall {
        // Removes what is there; creates nothing.
        return Ok(cleaned_up(&inst, "uninstall"));
    }
    prepare(&mut inst)?;
    let state = State::with_metrics(super::node::METRICS);
    let s = inst.settings();
    let once = s.once.then_some(s.wait_timeout);
    if once.is_none() {
        start_services(s, &state)?;
    }
    let mut watcher = watcher_for(&inst)?;
    let end = run::run_loop(&mut inst, &mut watcher, &state, Some(sigfd.as_fd()), once);
    state.set_ready(false);
    finish(&mut inst, &state, &sigfd, end)
}

/// Before the loop: the directories, the lease (a running agent), stale temp files, the host's iptables
/// backend.
fn prepare(inst: &mut Installer) -> Result<()> {
    let s = inst.settings();
    for d in [&s.mounted_cni_net_dir, &s.run_dir] {
        std::fs::create_dir_all(d).io_context(|| format!("create directory {}", d.display()))?;
    }
    crate::rundir::owner::make_private(&s.run_dir)?;
    log::info!(
        "conf dir {} (host {}), chained={}, run dir {}, bin dir {}",
        s.mounted_cni_net_dir.display(),
        s.cni_net_dir.display(),
        s.chained,
        s.run_dir.display(),
        s.bin_dir.display()
    );
    if !s.once {
        inst.join();
    }
    inst.sweep_conf_temps()?;
    let s = inst.settings();
    if s.native_nftables {
        // The plugin programs nf_tables over netlink: no host binary, so no iptables backend to probe.
        log::info!("native nftables mode: no iptables backend probe");
        return Ok(());
    }
    match crate::iptables::backend::record_host_backend(
        &s.run_dir,
        s.forced_iptables_backend,
        s.iptables_node_binaries,
    ) {
        Ok(b) => log::info!("host iptables backend: {b}"),
        Err(e) => {
            log::warn!(
                "could not record the host iptables backend (the plugin will detect it): {e}"
            )
        }
    }
    Ok(())
}

/// A running agent's services: metrics and health, the plugin's log relay, the node's pod watch.
fn start_services(s: &Settings, state: &std::sync::Arc<State>) -> Result<()> {
    let m = server::serve(s.monitoring_port, state.clone(), Endpoints::Metrics)?;
    let h = server::serve(s.health_port, state.clone(), Endpoints::Health)?;
    log::info!("metrics on {m}/metrics, health on {h}/healthz and /readyz");
    super::node::plugin_metrics::expect(s.native_nftables, s.pod_cache);
    let sock = relay::start(&s.run_dir)?;
    log::info!("relaying plugin logs from {}", sock.display());
    super::node::podwatch::start(s);
    Ok(())
}

/// The exit code for how the loop ended; at a stop or an error exit, the SIGTERM decision first, and the
/// cleanup when it says so.
fn finish(inst: &mut Installer, state: &State, sigfd: &SignalFd, end: Result<End>) -> Result<i32> {
    match end {
        Ok(End::Installed) => {
            log::info!("installed (--once)");
            Ok(0)
        }
        Ok(End::TimedOut) => {
            let s = inst.settings();
            log::error!(
                "no primary CNI configuration in {} within {:?}",
                s.mounted_cni_net_dir.display(),
                s.wait_timeout
            );
            Ok(1)
        }
        Ok(End::Stopped) => {
            let sig = match sigfd.read_signal() {
                Ok(Some(sig)) => format!("signal {}", sig.ssi_signo),
                _ => "stop".to_string(),
            };
            // Replacement (a rolling update, a restart) or uninstall: read our DaemonSet first.
            let d = decide_at_stop(inst, &sig);
            if d.verdict == super::handover::Verdict::Keep {
                if d.rule == super::handover::Rule::Replacement {
                    inst.release_no_primary();
                }
                return Ok(0);
            }
            Ok(cleaned_up(inst, "cleanup"))
        }
        Err(e) => {
            // Upstream runs cleanup in a defer on every exit of the run. An error exit of the DaemonSet's
            // container is followed by the kubelet restarting it, which is a replacement like any other:
            // the same rule decides, so a crash loop does not open the window a rolling update no longer
            // opens (keeping leaves pods redirected or failing closed; removing lets them start without).
            if state.restart_requested() {
                // Exiting so that the kubelet restarts us on a fresh mount: a replacement by definition.
                // Whatever is still visible (the conf dir when a bin or run dir was the deleted one) keeps
                // our entry, binary and kubeconfig for the next container.
                log::info!("error exit for a restart: configuration, binary and kubeconfig kept");
            } else if !inst.settings().once
                && decide_at_stop(inst, "error exit").verdict != super::handover::Verdict::Keep
            {
                cleaned_up(inst, "cleanup");
            }
            Err(e)
        }
    }
}

/// The SIGTERM decision ([`super::handover`]), logged after `what` with the time it took.
fn decide_at_stop(inst: &mut Installer, what: &str) -> super::handover::Decision {
    let started = std::time::Instant::now();
    let settings = inst.settings().clone();
    let d = super::handover::lookup::decide_at_stop(&settings, inst.lease_mut());
    log::info!(
        "{what}: {d} [decided in {} ms]",
        started.elapsed().as_millis()
    );
    d
}

/// Cleans up; the exit code (a failure logged after `what`).
fn cleaned_up(inst: &Installer, what: &str) -> i32 {
    match inst.cleanup() {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{what}: {e}");
            1
        }
    }
}
