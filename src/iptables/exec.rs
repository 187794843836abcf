//! Runs the node's iptables tools (IPTABLES_NODE_BINARIES only, [`super::io`]). Called from a thread that
//! is already inside the target network namespace (see [`crate::netns`]), so the child inherits it.

use super::{backend, Backend};
use crate::error::{Error, IoContext, Result};
use crate::netfilter::Family;
use std::io::Write;
use std::process::{Command, Stdio};

/// The xtables lock for legacy iptables: the namespace's own file, so we never wait on the host's
/// `/run/xtables.lock` (kube-proxy holds it for seconds on big clusters). Inside the child,
/// `/proc/self/ns/net` is the pod's namespace, so parallel ADDs into different pods never contend.
const POD_SCOPED_LOCK: &str = "/proc/self/ns/net";

fn command(b: Backend, family: Family, tool: &str) -> Result<Command> {
    let mut c = backend::require(b, family, tool)?.command();
    if b.uses_lock() {
        c.env("XTABLES_LOCKFILE", POD_SCOPED_LOCK);
    }
    Ok(c)
}

fn run(mut c: Command, what: String, stdin: Option<&str>) -> Result<String> {
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().io_context(|| format!("start {what}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .io_context(|| format!("write rules to {what}"))?;
    }
    let out = child
        .wait_with_output()
        .io_context(|| format!("wait for {what}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Exec {
            cmd: what,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// `iptables-restore --noflush` with `doc` on stdin (atomic: all or nothing per table).
pub fn restore(b: Backend, family: Family, doc: &str) -> Result<()> {
    let mut c = command(b, family, "restore")?;
    c.arg("--noflush");
    if b.uses_lock() {
        c.arg("--wait=30");
    }
    run(c, b.program(family, "restore") + " --noflush", Some(doc)).map(|_| ())
}

/// `iptables-save` of the current namespace.
pub fn save(b: Backend, family: Family) -> Result<String> {
    let c = command(b, family, "save")?;
    run(c, b.program(family, "save"), None)
}
