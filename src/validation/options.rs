//! The `istio-validation` command line: upstream `istio-iptables`' flags ([`super::flags`]: every flag of
//! Istio 1.9 to master, pflag syntax), so the injected container's arguments work verbatim, and the
//! variables upstream reads for them. Env as upstream's `flag.BindEnv`: the flag name upper-cased with
//! `-` → `_`, plus the extra names it binds (`ISTIO_DUAL_STACK`, ...); a flag given wins.
//!
//! Read: `-p`, `-z`, `--iptables-probe-port`, `--probe-timeout` (what the check listens on, dials and
//! waits), `-u`/`-g` (whom to become when started as root), `--log_output_level`, `--dual-stack` (logged:
//! upstream's check picks the family by the pod's first address either way, see [`super::probe`]),
//! `--force-iptables-binary` (checked as upstream's `Validate` does). Every other flag only shapes the
//! rules `istio-iptables` would apply (ports, CIDRs, interfaces, mode, marks, DNS, nftables, reconcile,
//! dry run, ...) or its logging: with `--skip-rule-apply` upstream applies none either, and the check
//! (redirection of the proxy's loopback connection to a capture port) does not depend on them, so they
//! are accepted and ignored.

use super::flags::{self, BadFlag};
use crate::error::{Error, Result};
use std::fmt;
use std::time::Duration;

/// Exit code for a command line upstream refuses too: `pilot-agent` exits -1 (255) when cobra fails.
pub const EXIT_BAD_FLAGS: i32 = 255;
/// Exit code for a configuration upstream refuses after parsing (`handleErrorWithCode(err, 1)`), and for
/// a value the check cannot use (a port that is no port).
pub const EXIT_BAD_CONFIG: i32 = 1;

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
    /// `-u/--proxy-uid` as given: one uid or a comma-separated list (upstream exempts each from capture).
    pub proxy_uid: String,
    /// `-g/--proxy-gid` as given (default: the uid).
    pub proxy_gid: Option<String>,
    /// `--dual-stack` / `DUAL_STACK` / `ISTIO_DUAL_STACK`.
    pub dual_stack: bool,
    pub log_level: Option<String>,
    pub help: bool,
    pub version: bool,
    /// Variables upstream ignores silently (a value its flag's type refuses): said once logging runs.
    pub warnings: Vec<String>,
}

/// Why the command line or the environment is refused, with upstream's exit code for it.
#[derive(Debug)]
pub enum Refusal {
    Flags(BadFlag),
    Config(Error),
}

impl Refusal {
    pub fn code(&self) -> i32 {
        match self {
            Refusal::Flags(_) => EXIT_BAD_FLAGS,
            Refusal::Config(_) => EXIT_BAD_CONFIG,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Flags(e) => e.fmt(f),
            Refusal::Config(e) => e.fmt(f),
        }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal::Config(e)
    }
}

/// The variables upstream reads for each flag the check uses, in upstream's order of precedence
/// (`AdditionalEnv` is applied after `BindEnv`, so it wins).
fn vars_of(long: &str) -> &'static [&'static str] {
    match long {
        "inbound-capture-port" => &["INBOUND_CAPTURE_PORT"],
        "iptables-probe-port" => &["IPTABLES_PROBE_PORT"],
        "probe-timeout" => &["PROBE_TIMEOUT"],
        "proxy-uid" => &["PROXY_UID"],
        "proxy-gid" => &["PROXY_GID"],
        "dual-stack" => &["ISTIO_DUAL_STACK", "DUAL_STACK"],
        "force-iptables-binary" => &["FORCE_IPTABLES_BINARY"],
        // `-p` has no variable in master (`flag.Bind`); the rest are not read.
        _ => &[],
    }
}

/// Flag `what`'s port.
fn port(what: &str, v: &str) -> Result<u16> {
    v.trim()
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| Error::config(format!("{what}: {v:?} is not a port")))
}

/// The first id of `-u`/`-g`'s list (`1337` or `3,4`).
fn first_id(what: &str, v: &str) -> Result<u32> {
    let first = v.split(',').next().unwrap_or(v).trim();
    first.parse::<u32>().map_err(|_| {
        Error::config(format!(
            "{what}: {v:?} does not start with a numeric id (e.g. 1337 or 1337,1338)"
        ))
    })
}

/// `HOST_IPV4_LOOPBACK_CIDR` as upstream's `ValidateIPv4LoopbackCidr`: an IPv4 loopback prefix, /8 to /32
/// (the plugin's rule for `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR`, the same upstream function).
fn loopback_cidr_ok(v: &str) -> bool {
    crate::redirect::capture::parse_loopback_cidr(v).is_ok()
}

/// Where a flag's value comes from: the command line (the last given) > the environment ("" is unset) >
/// none. A flag's value was checked by its type; a variable's value its type refuses is skipped, as
/// upstream's `BindEnv` ignores `Set`'s error, and said in `warnings`.
struct Sources<'a> {
    given: &'a flags::Given,
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
}

impl Sources<'_> {
    /// Flag `long`'s value and what gave it (`--long` or the variable's name).
    fn get(&mut self, long: &str) -> Option<(String, String)> {
        if let Some(v) = self.given.last(long) {
            return Some((format!("--{long}"), v.to_string()));
        }
        let kind = flags::FLAGS
            .iter()
            .find(|f| f.long == long)
            .map(|f| f.kind)?;
        for var in vars_of(long) {
            let Some(v) = (self.env)(var).filter(|v| !v.is_empty()) else {
                continue;
            };
            if flags::value_ok(kind, &v) {
                return Some((var.to_string(), v));
            }
            self.warnings.push(format!(
                "{var}={v:?} is ignored: not a valid value for --{long} (as upstream)"
            ));
        }
        None
    }

    /// Flag `long`'s port, or `default`.
    fn port_or(&mut self, long: &str, default: u16) -> Result<u16> {
        match self.get(long) {
            Some((what, v)) => port(&what, &v),
            None => Ok(default),
        }
    }

    /// What upstream's `Validate` refuses among the values the check does not otherwise use.
    fn refused(&mut self) -> Result<()> {
        if let Some((what, v)) = self.get("force-iptables-binary") {
            if !matches!(v.as_str(), "legacy" | "nft") {
                return Err(Error::config(format!(
                    "{what}: {v:?} is not an iptables binary (legacy or nft)"
                )));
            }
        }
        if let Some(v) = (self.env)("HOST_IPV4_LOOPBACK_CIDR").filter(|v| !v.is_empty()) {
            if !loopback_cidr_ok(&v) {
                return Err(Error::config(format!(
                    "HOST_IPV4_LOOPBACK_CIDR: {v:?} is not an IPv4 loopback CIDR with a /8 to /32 mask"
                )));
            }
        }
        Ok(())
    }
}

impl Options {
    pub fn parse(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<Options, Refusal> {
        let given = flags::scan(args).map_err(Refusal::Flags)?;
        if let Some(a) = given.positional.first() {
            return Err(Refusal::Flags(BadFlag(format!(
                "unexpected argument {a:?} (istio-validation takes flags only)"
            ))));
        }
        let mut src = Sources {
            given: &given,
            env,
            warnings: Vec::new(),
        };
        let envoy_port = src.port_or("envoy-port", 15001)?;
        let inbound_capture_port = src.port_or("inbound-capture-port", 15006)?;
        let probe_port = match src.get("iptables-probe-port") {
            Some((what, v)) => match flags::parse_uint16(&v) {
                Some(p) if p != 0 => p,
                _ => return Err(Error::config(format!("{what}: {v:?} is not a port")).into()),
            },
            None => 15002,
        };
        let probe_timeout = src
            .get("probe-timeout")
            .and_then(|(_, v)| crate::settings::go_duration(&v))
            .unwrap_or(Duration::from_secs(5));
        let proxy_uid = src
            .get("proxy-uid")
            .map_or_else(|| "1337".to_string(), |(_, v)| v);
        let proxy_gid = src.get("proxy-gid").map(|(_, v)| v);
        let dual_stack = src
            .get("dual-stack")
            .and_then(|(_, v)| crate::settings::go_bool(&v))
            .unwrap_or(false);
        src.refused()?;
        let log_level = src.get("log_output_level").map(|(_, v)| v);
        let warnings = src.warnings;
        Ok(Options {
            envoy_port,
            inbound_capture_port,
            probe_port,
            probe_timeout,
            proxy_uid,
            proxy_gid,
            dual_stack,
            log_level,
            help: given.help,
            version: given.version,
            warnings,
        })
    }

    /// The uid and gid to become when started as root: the first of `-u`'s list, the first of `-g`'s
    /// (default: that uid). Upstream never switches (it runs as the container's user), so a list or a
    /// value that is no number matters only here.
    pub fn proxy_ids(&self) -> Result<(u32, u32)> {
        let uid = first_id("--proxy-uid", &self.proxy_uid)?;
        let gid = match &self.proxy_gid {
            Some(g) => first_id("--proxy-gid", g)?,
            None => uid,
        };
        Ok((uid, gid))
    }
}

/// `--help`, in the layout argh gives the other applets.
pub const USAGE: &str = "Usage: istio-validation [options]

The istio-validation init container's check: exits 0 once a connection from the
proxy uid is redirected to a capture port. Takes istio-iptables' flags (every
flag of Istio 1.9 to master, pflag syntax), so the injected arguments work
unchanged; the ones that only shape rules or logging are accepted and ignored,
as no rule is applied.

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
  -u, --proxy-uid   the proxy's uid, or a list (1337,1338); started as root, the
                    check runs as the first [env: PROXY_UID] [default: 1337]
  -g, --proxy-gid   the proxy's gid, or a list [env: PROXY_GID] [default: the
                    uid]
  --dual-stack      logged only: the family checked is the pod's first
                    address's, as upstream [env: ISTIO_DUAL_STACK, DUAL_STACK]
                    [default: false]
  --force-iptables-binary
                    checked as upstream: legacy or nft [env:
                    FORCE_IPTABLES_BINARY] [default: \"\"]
  --log_output_level
                    scoped log levels, e.g. default:debug [default: info]
  --version         print the version and exit
  -h, --help        display usage information

Notes:
  Accepted and ignored, as they shape rules or logging only: -e -m -b -d -c
  -i -x -q -o -k -t -r, -n/--dry-run, -f/--restore-format, --skip-rule-apply,
  --run-validation, --redirect-dns, --capture-all-dns, --drop-invalid,
  --network-namespace, --cni-mode, --reconcile, --cleanup-only,
  --force-apply, --native-nftables, --iptables-trace-logging, --output-paths,
  --host-nsenter-exec, --iptables-version, --log_target, --log_as_json,
  --log_caller, --log_stacktrace_level, --log_rotate*, --vklog, and their
  variables (e.g. ISTIO_META_DNS_CAPTURE, INVALID_DROP).
  A boolean flag is true bare, or takes a value: --dry-run=false,
  --dry-run false. A value not of its flag's type is refused, as upstream;
  a variable's is ignored with a warning, as upstream ignores it.
  HOST_IPV4_LOOPBACK_CIDR is checked as upstream.
  RUST_LOG, when set, replaces the log level.

Error codes:
  0 redirection works
  1 bad configuration (a port that is no port, FORCE_IPTABLES_BINARY,
    HOST_IPV4_LOOPBACK_CIDR), or cannot switch to the proxy uid
  126 no redirected connection within the probe timeout (ValidationErrorCode)
  255 bad flags: one istio-iptables does not know, or a value not of its
    type (upstream's pilot-agent exits -1)
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
        assert_eq!(o.proxy_ids().unwrap(), (1337, 1337));
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
        let (uid, gid) = o.proxy_ids().unwrap();
        assert_eq!(
            (o.envoy_port, o.inbound_capture_port, uid, gid),
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

#[cfg(test)]
#[path = "options_upstream_tests.rs"]
mod upstream_tests;
