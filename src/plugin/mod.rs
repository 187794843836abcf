//! The `istio-cni` CNI plugin: reads the environment and stdin, dispatches the command, prints exactly one
//! JSON document (result or error) on stdout and returns the exit code. Logs go to stderr only.

pub mod add;
pub mod cli;
pub mod explain;

use crate::cni::{self, result, version, Command};
use crate::error::{Error, Result};
use crate::logging;
use log::Level;
use std::io::Read;

/// What one invocation produced: stdout text (may be empty) and the exit code.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub code: i32,
}

/// Runs the CNI command `cmd` for this process: real environment, stdin and stdout.
pub fn run_cni(cmd: &str) -> i32 {
    // A process that lives about a millisecond: allocations from a bump arena (crate::arena).
    crate::arena::ARENA.enable();
    // One thread, gone once the reply is written: the pod's namespace is entered on it (crate::netns).
    crate::netns::sole_thread();
    logging::init(log::LevelFilter::Info);
    let mut bytes = Vec::new();
    // Bounded read: a runtime never sends megabytes; anything larger is refused as a decode error.
    let read = std::io::stdin()
        .take(crate::json::MAX_INPUT as u64 + 1)
        .read_to_end(&mut bytes);
    let stdin = match read {
        Ok(_) => String::from_utf8(bytes)
            .map_err(|_| Error::Decode("network configuration: stdin is not valid UTF-8".into())),
        Err(e) => Err(Error::io("read network configuration from stdin", e)),
    };
    // Lossy, never "unset": a variable is bytes (Go's `os.Getenv` passes them on), and a CNI_ARGS with one
    // byte that is not UTF-8 must still name its pod, not pass as "not a Kubernetes pod".
    let env = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let out = handle(cmd, &env, stdin);
    // One write(2) for the whole reply (stdout's line buffering would split it at its last newline).
    let mut rest = out.stdout.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(std::io::stdout(), rest) {
            Ok(0) => break,
            Ok(n) => rest = &rest[n..],
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    out.code
}

/// The whole protocol, with the environment and stdin passed in (tests call this directly).
pub fn handle(cmd: &str, env: &dyn Fn(&str) -> Option<String>, stdin: Result<String>) -> Outcome {
    // Kept for an error reply, which carries the configuration's version when it can be read; parsed only
    // then, so a successful ADD parses its configuration once.
    let raw = stdin.as_ref().ok().cloned();
    let mut ran = None;
    let out = dispatch(cmd, env, stdin, &mut ran);
    // An ADD's last line (its decision, or its error) goes with its record: after the work, before the
    // reply, in one datagram the installer may never read.
    let line = match &out {
        Ok(_) => ran.as_mut().and_then(|r| r.line.take()),
        Err(e) => Some(format!("{cmd}: {e}")),
    };
    let level = if out.is_ok() {
        Level::Info
    } else {
        Level::Error
    };
    match (ran, line) {
        (Some(r), line) => {
            logging::log_with_record(level, line.as_deref(), r.record(out.is_ok()).encode())
        }
        (None, Some(line)) => log::log!(level, "{line}"),
        (None, None) => {}
    }
    match out {
        Ok(stdout) => Outcome { stdout, code: 0 },
        Err(e) => {
            let conf_version = raw
                .and_then(|s| crate::json::parse_object(&s, "stdin").ok())
                .and_then(|o| crate::json::str_of(&o, "cniVersion").map(str::to_string))
                .filter(|v| version::SUPPORTED.contains(&v.as_str()))
                .unwrap_or_else(|| version::CURRENT.to_string());
            Outcome {
                stdout: result::error_reply(&e, &conf_version),
                code: 1,
            }
        }
    }
}

fn dispatch(
    cmd: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: Result<String>,
    ran: &mut Option<add::Report>,
) -> Result<String> {
    let command = Command::parse(cmd)?;
    if command == Command::Version {
        // skel ignores stdin errors on VERSION; we echo its cniVersion when it names one we support.
        let requested = stdin
            .ok()
            .and_then(|s| crate::json::parse_object(&s, "stdin").ok())
            .and_then(|o| crate::json::str_of(&o, "cniVersion").map(str::to_string));
        return Ok(version::version_reply(requested.as_deref()) + "\n");
    }
    let cmd_env = cni::env::parse_env(command, env)?;
    if command == Command::Del {
        return del(&cmd_env, stdin);
    }
    let conf = cni::conf::parse(&stdin?)?;
    if let Some(level) = conf.log_level.as_deref().and_then(logging::parse_level) {
        logging::set_level(level);
    }
    logging::attach_relay(&conf.cni_agent_run_dir);
    logging::rolling::attach(&conf.cni_agent_run_dir);
    match command {
        Command::Add => {
            let report = ran.insert(add::Report::new(conf.native_nftables));
            add::add(&conf, &cmd_env, env, report)
        }
        Command::Check => {
            if !version::at_least(&conf.cni_version, "0.4.0") {
                return Err(Error::IncompatibleVersion(format!(
                    "configuration version {} does not allow CHECK (needs 0.4.0 or later)",
                    conf.cni_version
                )));
            }
            add::check(&conf, &cmd_env, env).map(|_| String::new())
        }
        Command::Status => {
            require_1_1(&conf.cni_version, "STATUS")?;
            status(&conf).map(|_| String::new())
        }
        Command::Gc => {
            require_1_1(&conf.cni_version, "GC")?;
            gc(&conf).map(|_| String::new())
        }
        Command::Del | Command::Version => Ok(String::new()),
    }
}

fn require_1_1(v: &str, what: &str) -> Result<()> {
    if version::at_least(v, "1.1.0") {
        Ok(())
    } else {
        Err(Error::IncompatibleVersion(format!(
            "configuration version {v} does not allow {what} (needs 1.1.0)"
        )))
    }
}

/// DEL is best-effort and always succeeds once the environment is valid: the pod's rules live in its network
/// namespace and die with it, so there is nothing of ours to remove. It needs neither a netns, a
/// prevResult, a readable configuration nor the API server.
fn del(env: &cni::CmdEnv, stdin: Result<String>) -> Result<String> {
    match stdin.and_then(|s| cni::conf::parse(&s)) {
        Ok(conf) => log::debug!(
            "DEL {} ({}): nothing to remove",
            env.container_id,
            conf.name
        ),
        Err(e) => log::warn!(
            "DEL {}: ignoring unreadable configuration: {e}",
            env.container_id
        ),
    }
    Ok(String::new())
}

/// STATUS: ready when the kubeconfig the installer writes exists (without it no sidecar pod can be
/// redirected); otherwise code 50.
fn status(conf: &cni::NetConf) -> Result<()> {
    let path = conf.kubeconfig_path();
    if std::path::Path::new(&path).is_file() {
        Ok(())
    } else {
        Err(Error::NotAvailable(format!(
            "kubeconfig {path} is missing: is the istio-cni-node DaemonSet running?"
        )))
    }
}

/// GC: we keep no per-attachment state outside the pod's own network namespace, so there is nothing to
/// collect. The attachment list is still validated.
fn gc(conf: &cni::NetConf) -> Result<()> {
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        match conf.raw.get(key) {
            None | Some(crate::json::Value::Null) | Some(crate::json::Value::Array(_)) => {}
            Some(_) => {
                return Err(Error::Decode(format!(
                    "network configuration: {key:?} must be a list"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod protocol_tests;
