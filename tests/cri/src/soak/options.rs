//! The soak's command line and its chaos kinds.

use std::path::PathBuf;

/// Where our entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `ISTIO_OWNED_CNI_CONFIG=true`: our own higher-priority file (the primary's plugins plus ours).
    Owned,
    /// The chart's default: our entry merged into the primary's file.
    Default,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Owned => "owned",
            Layout::Default => "default",
        }
    }
}

/// A chaos kind. Each belongs to one lane; the lanes run side by side, each one event at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A DaemonSet roll with maxSurge: the new agent ready before the old one gets SIGTERM.
    RollSurge,
    /// A roll with maxUnavailable: the old agent ended first, the new one created 200 ms later.
    RollUnavailable,
    /// The agent SIGKILLed (an OOM kill, a crash); kubelet restarts its container in place.
    AgentKill,
    /// containerd SIGKILLed mid-whatever and started again (its service manager's restart).
    ContainerdRestart,
    /// A reboot: every pod gone, the run dir empty, containerd started afresh, then the agent's pod.
    Reboot,
    /// A burst of API errors (500, 503, 429, Retry-After, dropped connections, slow answers, watches
    /// closed or expired).
    ApiFault,
    /// The API server unreachable for seconds (every request and watch stalls).
    ApiOutage,
    /// The current primary rewritten (temp file + rename) by its own agent, without our entry.
    PrimaryRewrite,
    /// A higher-priority primary appears (another CNI installed, a primary renamed on upgrade).
    PrimaryAppear,
    /// That primary disappears again.
    PrimaryDisappear,
}

/// Which lane runs a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The agent's and the runtime's lifecycle.
    Lifecycle,
    /// Other writers of the runtime's configuration directory.
    ConfDir,
    /// The API server.
    Api,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::RollSurge,
        Kind::RollUnavailable,
        Kind::AgentKill,
        Kind::ContainerdRestart,
        Kind::Reboot,
        Kind::ApiFault,
        Kind::ApiOutage,
        Kind::PrimaryRewrite,
        Kind::PrimaryAppear,
        Kind::PrimaryDisappear,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::RollSurge => "roll-surge",
            Kind::RollUnavailable => "roll-unavailable",
            Kind::AgentKill => "agent-kill",
            Kind::ContainerdRestart => "containerd-restart",
            Kind::Reboot => "reboot",
            Kind::ApiFault => "api-fault",
            Kind::ApiOutage => "api-outage",
            Kind::PrimaryRewrite => "primary-rewrite",
            Kind::PrimaryAppear => "primary-appear",
            Kind::PrimaryDisappear => "primary-disappear",
        }
    }

    pub fn lane(self) -> Lane {
        match self {
            Kind::RollSurge
            | Kind::RollUnavailable
            | Kind::AgentKill
            | Kind::ContainerdRestart
            | Kind::Reboot => Lane::Lifecycle,
            Kind::ApiFault | Kind::ApiOutage => Lane::Api,
            Kind::PrimaryRewrite | Kind::PrimaryAppear | Kind::PrimaryDisappear => Lane::ConfDir,
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub seconds: u64,
    pub seed: u64,
    pub layout: Layout,
    /// The kinds that run (appear and disappear always together).
    pub kinds: Vec<Kind>,
    /// Variables added to the agent's environment after the chart's (e.g. `DISABLE_SAFE_UPGRADE=true`).
    pub agent_env: Vec<(String, String)>,
    /// The JSON report (default `target/soak/soak-<layout>-<seed>.json`).
    pub out: Option<PathBuf>,
    /// The higher-priority primary's file name.
    pub higher_name: String,
    /// Sidecar pods in flight at once.
    pub in_flight: usize,
}

pub const USAGE: &str = "usage: soak [SECONDS] [--seed N] [--layout owned|default] [--kinds K,K,...] \
[--agent-env NAME=VALUE]... [--higher-name FILE] [--in-flight N] [--out FILE.json]
  SECONDS       how long pods churn under chaos (default 600)
  --seed N      the chaos sequence (default: from the clock; printed, so a run can be replayed)
  --layout      owned (ISTIO_OWNED_CNI_CONFIG=true, the default here) or default (entry in the primary)
  --kinds       chaos kinds (default all): roll-surge, roll-unavailable, agent-kill, containerd-restart,
                reboot, api-fault, api-outage, primary-rewrite, primary-appear (with primary-disappear)
  --agent-env   added to the agent's environment (repeatable), e.g. DISABLE_SAFE_UPGRADE=true
  --higher-name the higher-priority primary's file name (default 05-soak.conflist; 01-... sorts before
                the owned file 02-istio-cni.conflist)
  --in-flight N sidecar pods handled at once (default 6)
  --out FILE    the JSON report's path (a directory: the default name in it)";

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        seconds: 600,
        seed: seed_from_clock(),
        layout: Layout::Owned,
        kinds: Kind::ALL.to_vec(),
        agent_env: Vec::new(),
        out: None,
        higher_name: "05-soak.conflist".into(),
        in_flight: 6,
    };
    let mut it = args.iter();
    let mut seconds_seen = false;
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--seed" => o.seed = number("--seed", &value("--seed")?)?,
            "--layout" => {
                o.layout = match value("--layout")?.as_str() {
                    "owned" => Layout::Owned,
                    "default" => Layout::Default,
                    other => return Err(format!("--layout {other}: owned or default")),
                }
            }
            "--kinds" => {
                let mut kinds = Vec::new();
                for k in value("--kinds")?.split(',').filter(|k| !k.is_empty()) {
                    let kind =
                        Kind::parse(k).ok_or_else(|| format!("--kinds: unknown kind {k}"))?;
                    kinds.push(kind);
                    // A primary that appears also disappears (and the other way round).
                    match kind {
                        Kind::PrimaryAppear => kinds.push(Kind::PrimaryDisappear),
                        Kind::PrimaryDisappear => kinds.push(Kind::PrimaryAppear),
                        _ => {}
                    }
                }
                kinds.sort();
                kinds.dedup();
                o.kinds = kinds;
            }
            "--agent-env" => {
                let kv = value("--agent-env")?;
                let (k, v) = kv
                    .split_once('=')
                    .filter(|(k, _)| !k.is_empty())
                    .ok_or_else(|| format!("--agent-env {kv}: NAME=VALUE"))?;
                o.agent_env.push((k.to_string(), v.to_string()));
            }
            "--higher-name" => {
                let n = value("--higher-name")?;
                if n.contains('/') || !n.ends_with(".conflist") || n.len() <= ".conflist".len() {
                    return Err(format!(
                        "--higher-name {n}: a file name ending in .conflist"
                    ));
                }
                o.higher_name = n;
            }
            "--in-flight" => {
                o.in_flight = number("--in-flight", &value("--in-flight")?)? as usize;
                if o.in_flight == 0 {
                    return Err("--in-flight must be at least 1".into());
                }
            }
            "--out" => o.out = Some(PathBuf::from(value("--out")?)),
            "-h" | "--help" => return Err(USAGE.into()),
            s if !s.starts_with('-') && !seconds_seen => {
                o.seconds = number("SECONDS", s)?;
                seconds_seen = true;
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(o)
}

fn number(name: &str, s: &str) -> Result<u64, String> {
    s.parse()
        .map_err(|_| format!("{name} {s}: not a non-negative integer"))
}

fn seed_from_clock() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ u64::from(std::process::id())) % 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_and_refuses() {
        let o = parse(&args(
            "120 --seed 7 --layout default --kinds roll-unavailable,primary-appear --agent-env A=b=c",
        ))
        .unwrap();
        assert_eq!((o.seconds, o.seed, o.layout), (120, 7, Layout::Default));
        assert_eq!(
            o.kinds,
            vec![
                Kind::RollUnavailable,
                Kind::PrimaryAppear,
                Kind::PrimaryDisappear
            ]
        );
        assert_eq!(o.agent_env, vec![("A".to_string(), "b=c".to_string())]);
        assert_eq!(parse(&[]).unwrap().seconds, 600);
        for bad in [
            "--layout both",
            "--kinds nope",
            "--seed x",
            "10 20",
            "--agent-env =x",
            "--higher-name a/b.conflist",
            "--in-flight 0",
            "--seed",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
