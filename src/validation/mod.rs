//! The `istio-validation` applet: what upstream's `istio-iptables --run-validation --skip-rule-apply` does
//! in the injected `istio-validation` init container. Exit 0 when traffic from the proxy uid is redirected
//! to the capture ports, 126 (upstream `ValidationErrorCode`, what the repair agent looks for) when not;
//! on a bad command line or configuration, upstream's codes: 255 for a flag or value pflag refuses, 1 for
//! a configuration refused after parsing ([`options::Refusal`]); 1 when it cannot become the proxy.
//! Nothing is written to `/dev/termination-log`, as upstream.

pub mod flags;
pub mod options;
pub mod probe;

use options::Options;
use probe::Verdict;

/// Exit code for a failed validation (upstream `constants.ValidationErrorCode`).
pub const VALIDATION_ERROR_CODE: i32 = 126;

const FAILED_HELP: &str = "iptables validation failed; workload is not ready for Istio.
When using Istio CNI, this can occur if a pod is scheduled before the node is ready.

If installed with 'cni.repair.deletePods=true', this pod should automatically be deleted and retry.
Otherwise, this pod will need to be manually removed so that it is scheduled on a node with istio-cni running, allowing iptables rules to be established.";

/// Runs the check as the proxy: when started as root (and the proxy uid is not 0), switch to the proxy
/// gid/uid first, since only the proxy's traffic is redirected by the sidecar rules. Sockets are created
/// after the switch, so they are owned by the proxy uid.
fn become_proxy(o: &Options) -> crate::Result<()> {
    use nix::unistd::{geteuid, setgid, setgroups, setuid, Gid, Uid};
    if !geteuid().is_root() {
        return Ok(());
    }
    let (uid, gid) = o.proxy_ids()?;
    if uid == 0 {
        return Ok(());
    }
    let err = |what: &str, e: nix::Error| crate::Error::io(what.to_string(), e.into());
    setgroups(&[Gid::from_raw(gid)]).map_err(|e| err("setgroups", e))?;
    setgid(Gid::from_raw(gid)).map_err(|e| err(&format!("setgid {gid}"), e))?;
    setuid(Uid::from_raw(uid)).map_err(|e| err(&format!("setuid {uid}"), e))?;
    log::info!("validation: started as root; checking as the proxy uid {uid} gid {gid}");
    Ok(())
}

/// The applet entry point.
pub fn main(name: &str, args: &[String]) -> i32 {
    use crate::applet::{print_err, print_out};
    let o = match Options::parse(args, &|k| std::env::var(k).ok()) {
        Ok(o) => o,
        Err(e) => {
            crate::applet::usage_error(name, &e.to_string());
            return e.code();
        }
    };
    if o.help {
        return print_out(name, options::USAGE, 0);
    }
    if o.version {
        return crate::applet::print_version(name);
    }
    crate::logging::init(log::LevelFilter::Info);
    if let Some(l) = o.log_level.as_deref() {
        // Istio's form is `scope:level,...`; the last level named wins here.
        if let Some(level) = l
            .rsplit(',')
            .find_map(|t| crate::logging::parse_level(t.rsplit(':').next().unwrap_or(t)))
        {
            crate::logging::set_level(level);
        }
    }
    for w in &o.warnings {
        log::warn!("validation: {w}");
    }
    if o.dual_stack {
        log::info!("validation: dual-stack: the family checked is still the pod's first address's, as upstream");
    }
    if let Err(e) = become_proxy(&o) {
        print_err(&format!(
            "{name}: cannot switch to the proxy uid {:?}: {e}\n",
            o.proxy_uid
        ));
        return options::EXIT_BAD_CONFIG;
    }
    let ipv6 = probe::pod_is_ipv6();
    let (lo, dst) = probe::loopbacks(ipv6);
    log::info!(
        "validation: listening on {lo}:{} and {lo}:{}, probing {dst}:{} for up to {:?}",
        o.envoy_port,
        o.inbound_capture_port,
        o.probe_port,
        o.probe_timeout
    );
    match probe::check(&o, ipv6) {
        Ok(Verdict::Passed) => {
            print_out(name, "Validation passed, iptables rules established\n", 0)
        }
        Ok(Verdict::Timeout(why)) => {
            print_err(&format!("{name}: {why}\n{FAILED_HELP}\n"));
            VALIDATION_ERROR_CODE
        }
        Err(e) => {
            print_err(&format!("{name}: {e}\n{FAILED_HELP}\n"));
            VALIDATION_ERROR_CODE
        }
    }
}
