//! The CNI environment (`CNI_COMMAND`, `CNI_CONTAINERID`, ...), parsed and validated as libcni's skel does.
//! Pure: the caller passes a lookup function, so tests need no process environment.

use crate::error::{Error, Result};

/// A CNI operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Result<Command> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            other => {
                return Err(Error::env(
                    "CNI_COMMAND",
                    format!(
                    "unknown command {other:?} (expected ADD, DEL, CHECK, GC, STATUS or VERSION)"
                ),
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }
}

/// The validated CNI environment of one invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdEnv {
    pub container_id: String,
    /// Empty when the runtime sent none (allowed for DEL only).
    pub netns: String,
    pub ifname: String,
    /// The raw `CNI_ARGS` value (parse it with [`crate::cni::args::K8sArgs::parse`]).
    pub args: String,
    pub path: String,
}

/// Reads and validates the variables `cmd` needs (skel `getCmdArgsFromEnv`): a missing or invalid one is
/// CNI error code 4 naming it.
pub fn parse_env(cmd: Command, get: &dyn Fn(&str) -> Option<String>) -> Result<CmdEnv> {
    use Command::*;
    let needs = |var: &str| -> bool {
        match var {
            "CNI_CONTAINERID" | "CNI_IFNAME" => matches!(cmd, Add | Del | Check),
            "CNI_NETNS" => matches!(cmd, Add | Check),
            "CNI_PATH" => matches!(cmd, Add | Del | Check | Gc | Status),
            _ => false,
        }
    };
    let fetch = |var: &str| -> Result<String> {
        let v = get(var).unwrap_or_default();
        if v.is_empty() && needs(var) {
            return Err(Error::env(
                var,
                format!("required for {} but not set", cmd.as_str()),
            ));
        }
        Ok(v)
    };
    let env = CmdEnv {
        container_id: fetch("CNI_CONTAINERID")?,
        netns: fetch("CNI_NETNS")?,
        ifname: fetch("CNI_IFNAME")?,
        args: get("CNI_ARGS").unwrap_or_default(),
        path: fetch("CNI_PATH")?,
    };
    if needs("CNI_CONTAINERID") {
        validate_container_id(&env.container_id)?;
    }
    if needs("CNI_IFNAME") {
        validate_ifname(&env.ifname)?;
    }
    Ok(env)
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$` (libcni `ValidateContainerID`).
pub fn validate_container_id(id: &str) -> Result<()> {
    let mut chars = id.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::env(
            "CNI_CONTAINERID",
            format!("invalid container id {id:?}: must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"),
        ))
    }
}

/// 1-15 bytes, not `.` or `..`, no `/`, `:` or whitespace (libcni `ValidateInterfaceName`).
pub fn validate_ifname(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > 15 {
        Some("longer than 15 bytes")
    } else if name == "." || name == ".." {
        Some("may not be . or ..")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        Some("may not contain '/', ':' or whitespace")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(r) => Err(Error::env(
            "CNI_IFNAME",
            format!("invalid interface name {name:?}: {r}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env_of as env;

    const FULL: &[(&str, &str)] = &[
        ("CNI_CONTAINERID", "abc123"),
        ("CNI_NETNS", "/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
        ("CNI_ARGS", "K8S_POD_NAME=a"),
    ];

    #[test]
    fn full_add_env_parses() {
        let e = parse_env(Command::Add, &env(FULL)).unwrap();
        assert_eq!(e.container_id, "abc123");
        assert_eq!(e.netns, "/run/netns/x");
        assert_eq!(e.args, "K8S_POD_NAME=a");
    }

    #[test]
    fn each_missing_variable_is_named_with_code_4() {
        for (cmd, var) in [
            (Command::Add, "CNI_CONTAINERID"),
            (Command::Add, "CNI_NETNS"),
            (Command::Add, "CNI_IFNAME"),
            (Command::Add, "CNI_PATH"),
            (Command::Check, "CNI_NETNS"),
            (Command::Del, "CNI_CONTAINERID"),
        ] {
            let pairs: Vec<_> = FULL.iter().copied().filter(|(k, _)| *k != var).collect();
            let e = parse_env(cmd, &env(&pairs)).unwrap_err();
            assert_eq!(e.cni_code(), 4, "{var}");
            assert!(e.to_string().contains(var), "{e}");
        }
    }

    #[test]
    fn del_needs_no_netns() {
        let pairs: Vec<_> = FULL
            .iter()
            .copied()
            .filter(|(k, _)| *k != "CNI_NETNS")
            .collect();
        assert_eq!(parse_env(Command::Del, &env(&pairs)).unwrap().netns, "");
    }

    #[test]
    fn version_needs_nothing() {
        assert!(parse_env(Command::Version, &env(&[])).is_ok());
    }

    #[test]
    fn container_ids() {
        for ok in ["a", "A9", "abc_def.ghi-jkl", "0"] {
            assert!(validate_container_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", "a b", "a/b", "ä"] {
            assert_eq!(
                validate_container_id(bad).unwrap_err().cni_code(),
                4,
                "{bad}"
            );
        }
    }

    #[test]
    fn interface_names() {
        for ok in ["eth0", "a", "123456789012345", "net1.100"] {
            assert!(validate_ifname(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "1234567890123456"] {
            let e = validate_ifname(bad).unwrap_err();
            assert!(e.to_string().contains("CNI_IFNAME"), "{bad}");
        }
    }

    #[test]
    fn unknown_command_is_code_4() {
        assert_eq!(Command::parse("FOO").unwrap_err().cni_code(), 4);
        assert_eq!(Command::parse("ADD").unwrap(), Command::Add);
    }
}
