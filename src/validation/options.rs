//! The `istio-validation` command line: upstream `istio-iptables` flags (pflag syntax: `-p 15001`,
//! `-p=15001`, `--envoy-port 15001`, `--envoy-port=15001`, bare booleans), so the injected container's
//! arguments work verbatim. The flags that only shape rules are accepted and ignored: this applet never
//! applies rules, it checks them. Env as upstream: the flag name upper-cased with `-` → `_`.

use crate::error::{Error, Result};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `-p/--envoy-port`: the outbound capture port.
    pub envoy_port: u16,
    /// `-z/--inbound-capture-port`.
    pub inbound_capture_port: u16,
    /// `--iptables-probe-port`: the port dialled on 127.0.0.6 / ::6.
    pub probe_port: u16,
    /// `--probe-timeout`.
    pub probe_timeout: Duration,
    /// `-u/--proxy-uid`: the proxy's uid; when started as root the check drops to it.
    pub proxy_uid: u32,
    /// `-g/--proxy-gid` (default: the uid).
    pub proxy_gid: u32,
    pub log_level: Option<String>,
    pub help: bool,
    pub version: bool,
}

/// Flags taking a value: (short, long, env). Those marked ignored only shape rules.
const VALUED: &[(Option<char>, &str, Option<&str>)] = &[
    (Some('p'), "envoy-port", None),
    (
        Some('z'),
        "inbound-capture-port",
        Some("INBOUND_CAPTURE_PORT"),
    ),
    (None, "iptables-probe-port", Some("IPTABLES_PROBE_PORT")),
    (None, "probe-timeout", Some("PROBE_TIMEOUT")),
    (Some('u'), "proxy-uid", None),
    (Some('g'), "proxy-gid", None),
    (None, "log_output_level", None),
    // Rule-shaping flags: accepted, ignored.
    (Some('e'), "inbound-tunnel-port", None),
    (Some('m'), "istio-inbound-interception-mode", None),
    (Some('t'), "istio-inbound-tproxy-mark", None),
    (Some('r'), "istio-inbound-tproxy-route-table", None),
    (Some('b'), "istio-inbound-ports", None),
    (Some('d'), "istio-local-exclude-ports", None),
    (Some('o'), "istio-local-outbound-ports-exclude", None),
    (Some('q'), "istio-outbound-ports", None),
    (Some('i'), "istio-service-cidr", None),
    (Some('x'), "istio-service-exclude-cidr", None),
    (Some('k'), "kube-virt-interfaces", None),
    (Some('c'), "istio-exclude-interfaces", None),
    (None, "network-namespace", None),
    (None, "log_target", None),
    (None, "log_caller", None),
    (None, "log_stacktrace_level", None),
    (None, "log_rotate", None),
    (None, "log_rotate_max_age", None),
    (None, "log_rotate_max_backups", None),
    (None, "log_rotate_max_size", None),
];

/// Boolean flags, all ignored (validation is what we do anyway; we never apply rules).
const BOOLS: &[(Option<char>, &str)] = &[
    (None, "run-validation"),
    (None, "skip-rule-apply"),
    (Some('n'), "dry-run"),
    (None, "redirect-dns"),
    (None, "capture-all-dns"),
    (None, "drop-invalid"),
    (None, "native-nftables"),
    (None, "dual-stack"),
    (None, "cni-mode"),
    (None, "reconcile"),
    (None, "cleanup-only"),
    (None, "force-apply"),
    (None, "log_as_json"),
    (None, "restore-format"),
    (Some('a'), "trace-logging"),
];

/// Flag `what`'s port, `default` when not given.
fn port(what: &str, v: Option<String>, default: u16) -> Result<u16> {
    let Some(v) = v else { return Ok(default) };
    v.trim()
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| Error::config(format!("{what}: {v:?} is not a port")))
}

/// Flag `what`'s numeric id, `default` when not given.
fn id(what: &str, v: Option<String>, default: u32) -> Result<u32> {
    let Some(v) = v else { return Ok(default) };
    v.trim()
        .parse::<u32>()
        .map_err(|_| Error::config(format!("{what}: {v:?} is not a numeric id")))
}

/// The flags as given: the valued ones in order, and whether help or the version was asked for.
struct Given {
    values: Vec<(&'static str, String)>,
    help: bool,
    version: bool,
}

/// Scans `args` in pflag syntax: valued flags take `=v` or the next argument; booleans are checked and
/// dropped (every one is ignored).
fn scan(args: &[String]) -> Result<Given> {
    let mut given = Given {
        values: Vec::new(),
        help: false,
        version: false,
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "-h" || a == "--help" {
            given.help = true;
            continue;
        }
        if a == "--version" {
            given.version = true;
            continue;
        }
        let (name, inline) = split_flag(a)?;
        if let Some(f) = VALUED.iter().find(|f| f.1 == name) {
            let v = match inline {
                Some(v) => v,
                None => {
                    let v = args.get(i).ok_or_else(|| {
                        Error::config(format!("flag needs an argument: --{name}"))
                    })?;
                    i += 1;
                    v.clone()
                }
            };
            given.values.push((f.1, v));
        } else if BOOLS.iter().any(|f| f.1 == name) {
            // As every applet's booleans: bare, `--name=v`, or `--name v` when v is not a flag.
            let inline = inline.or_else(|| {
                let next = args.get(i).filter(|n| !n.starts_with('-'))?;
                i += 1;
                Some(next.clone())
            });
            if let Some(v) = inline {
                crate::settings::go_bool(&v)
                    .ok_or_else(|| Error::config(format!("--{name}: {v:?} is not a boolean")))?;
            }
        } else {
            return Err(Error::config(format!("unrecognized argument: --{name}")));
        }
    }
    Ok(given)
}

/// `--name[=v]` or a shorthand `-c[[=]v]`: the flag's long name and its inline value.
fn split_flag(a: &str) -> Result<(String, Option<String>)> {
    if let Some(l) = a.strip_prefix("--") {
        return Ok(match l.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (l.to_string(), None),
        });
    }
    let Some(sh) = a.strip_prefix('-').filter(|s| !s.is_empty()) else {
        return Err(Error::config(format!("unexpected argument {a:?}")));
    };
    let mut cs = sh.chars();
    let c = cs.next().unwrap_or('-');
    let tail: String = cs.collect();
    let long = VALUED
        .iter()
        .find(|f| f.0 == Some(c))
        .map(|f| f.1)
        .or_else(|| BOOLS.iter().find(|f| f.0 == Some(c)).map(|f| f.1))
        .ok_or_else(|| Error::config(format!("unknown shorthand flag: {c:?} in {a}")))?;
    let tail = tail
        .strip_prefix('=')
        .map(str::to_string)
        .or((!tail.is_empty()).then_some(tail));
    Ok((long.to_string(), tail))
}

impl Options {
    pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Options> {
        let given = scan(args)?;
        // flag (the last given) > env (upstream's viper without AllowEmptyEnv: "" is unset) > default.
        let get = |long: &str| -> Option<String> {
            let flag = given.values.iter().rev().find(|(n, _)| *n == long);
            let flag = flag.map(|(n, v)| (format!("--{n}"), v.clone()));
            let vars: Vec<&str> = VALUED
                .iter()
                .filter(|f| f.1 == long)
                .filter_map(|f| f.2)
                .collect();
            crate::settings::pick(flag, env, &vars, crate::settings::EmptyEnv::Unset)
                .map(|f| f.value)
        };
        let uid = id("--proxy-uid", get("proxy-uid"), 1337)?;
        Ok(Options {
            envoy_port: port("--envoy-port", get("envoy-port"), 15001)?,
            inbound_capture_port: port(
                "--inbound-capture-port",
                get("inbound-capture-port"),
                15006,
            )?,
            probe_port: port("--iptables-probe-port", get("iptables-probe-port"), 15002)?,
            probe_timeout: match get("probe-timeout") {
                None => Duration::from_secs(5),
                Some(v) => crate::settings::go_duration(&v).ok_or_else(|| {
                    Error::config(format!(
                        "--probe-timeout: {v:?} is not a duration (e.g. 5s)"
                    ))
                })?,
            },
            proxy_uid: uid,
            proxy_gid: id("--proxy-gid", get("proxy-gid"), uid)?,
            log_level: get("log_output_level"),
            help: given.help,
            version: given.version,
        })
    }
}

/// `--help`, in the layout argh gives the other applets.
pub const USAGE: &str = "Usage: istio-validation [options]

The istio-validation init container's check: exits 0 once a connection from the
proxy uid is redirected to a capture port. Takes istio-iptables' flags (pflag
syntax), so the injected arguments work unchanged; the ones that only shape
rules are accepted and ignored, as no rule is applied.

Options:
  -p, --envoy-port  outbound capture port to listen on [default: 15001]
  -z, --inbound-capture-port
                    inbound capture port to listen on [env:
                    INBOUND_CAPTURE_PORT] [default: 15006]
  --iptables-probe-port
                    port dialled on 127.0.0.6 (::6 for IPv6 pods)
                    [env: IPTABLES_PROBE_PORT] [default: 15002]
  --probe-timeout   give up after this long, e.g. 5s, 500ms [env: PROBE_TIMEOUT]
                    [default: 5s]
  -u, --proxy-uid   the proxy's uid; started as root, the check runs as it
                    [default: 1337]
  -g, --proxy-gid   the proxy's gid [default: the uid]
  --log_output_level
                    scoped log levels, e.g. default:debug [default: info]
  --version         print the version and exit
  -h, --help        display usage information

Notes:
  A boolean flag is true bare, or takes a value: --dry-run=false,
  --dry-run false.
  RUST_LOG, when set, replaces the log level.

Error codes:
  0 redirection works
  1 cannot switch to the proxy uid
  2 bad flags or environment
  126 no redirected connection within the probe timeout (ValidationErrorCode)
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::{v, words};

    #[test]
    fn injected_arguments_parse() {
        // `-x ""`: an empty value.
        let args = words(
            "-p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x  -b * -d 15090,15021,15020 \
             --log_output_level=default:info --run-validation --skip-rule-apply --native-nftables",
        );
        let o = Options::parse(&args, &|_| None).unwrap();
        assert_eq!(
            (o.envoy_port, o.inbound_capture_port, o.probe_port),
            (15001, 15006, 15002)
        );
        assert_eq!((o.proxy_uid, o.proxy_gid), (1337, 1337));
        assert_eq!(o.probe_timeout, Duration::from_secs(5));
        assert_eq!(o.log_level.as_deref(), Some("default:info"));
    }

    #[test]
    fn env_and_forms() {
        let env = |k: &str| match k {
            "PROBE_TIMEOUT" => Some("1m30s".to_string()),
            "IPTABLES_PROBE_PORT" => Some("16000".to_string()),
            _ => None,
        };
        let o = Options::parse(&v(&["-p=1", "-z2", "--proxy-uid=5", "-g", "6"]), &env).unwrap();
        assert_eq!(
            (
                o.envoy_port,
                o.inbound_capture_port,
                o.proxy_uid,
                o.proxy_gid
            ),
            (1, 2, 5, 6)
        );
        assert_eq!(
            (o.probe_port, o.probe_timeout),
            (16000, Duration::from_secs(90))
        );
        let o = Options::parse(
            &v(&["--iptables-probe-port", "17", "--probe-timeout=250ms"]),
            &env,
        )
        .unwrap();
        assert_eq!(
            (o.probe_port, o.probe_timeout),
            (17, Duration::from_millis(250))
        );
    }

    #[test]
    fn errors_name_the_flag() {
        for (args, want) in [
            (vec!["--nope"], "--nope"),
            (vec!["-p", "x"], "--envoy-port"),
            (vec!["--probe-timeout", "5"], "--probe-timeout"),
            (vec!["-p"], "--envoy-port"),
            (vec!["-Q"], "'Q'"),
            (vec!["stray"], "stray"),
            (vec!["--run-validation=maybe"], "run-validation"),
            (vec!["--run-validation", "maybe"], "run-validation"),
            (vec!["-n", "maybe"], "dry-run"),
        ] {
            let e = Options::parse(&v(&args), &|_| None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    /// Booleans take the forms every applet's do: bare, `=v`, and `v` as the next argument.
    #[test]
    fn boolean_forms() {
        for args in [
            "--run-validation --skip-rule-apply -p 1",
            "--run-validation=false --skip-rule-apply=true -p 1",
            "--run-validation false --skip-rule-apply 1 -p 1",
            "-n true -p 1",
        ] {
            let o = Options::parse(&words(args), &|_| None).unwrap();
            assert_eq!(o.envoy_port, 1, "{args:?}");
        }
        let o = Options::parse(&v(&["--version"]), &|_| None).unwrap();
        assert!(o.version && !o.help);
    }
}
