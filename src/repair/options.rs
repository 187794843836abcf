//! The repair settings (upstream `RepairConfig`) and where they come from: master's `--repair-*` flags and
//! `REPAIR_*` env (`-` → `_`), and release-1.9's flags (`--label-pods`, ...) and env (`REPAIR_` + the flag
//! name upper-cased with its hyphens kept, e.g. `REPAIR_LABEL-PODS`). An explicit flag beats env, env beats
//! the default; among env names the master spelling wins. What an empty env value means depends on who
//! reads it (see [`resolve`]).

use crate::error::{Error, Result};
use crate::settings::{self, EmptyEnv, Env};

/// Detection and action settings; field for field upstream's `RepairConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub enabled: bool,
    pub node_name: String,
    pub label_key: String,
    pub label_value: String,
    pub repair_pods: bool,
    pub delete_pods: bool,
    pub label_pods: bool,
    /// Annotation key a pod must carry to be considered (any value); "" disables the check.
    pub sidecar_annotation: String,
    /// Init container to inspect; "" means every init container.
    pub init_container_name: String,
    /// Required termination message (compared trimmed); "" means any.
    pub init_termination_msg: String,
    /// Required exit code of the last termination; 0 means any.
    pub init_exit_code: i64,
    pub label_selectors: String,
    pub field_selectors: String,
}

pub const DEFAULT_SIDECAR_ANNOTATION: &str = "sidecar.istio.io/status";
pub const DEFAULT_INIT_CONTAINER: &str = "istio-validation";
pub const DEFAULT_LABEL_KEY: &str = "cni.istio.io/uninitialized";
pub const DEFAULT_LABEL_VALUE: &str = "true";
/// `constants.ValidationErrorCode`.
pub const VALIDATION_ERROR_CODE: i64 = 126;
pub const DEFAULT_MONITORING_PORT: u16 = 15014;
/// Where the host's `/proc` is mounted in the DaemonSet pod (upstream `HostMountsPath`).
pub const DEFAULT_HOST_PROC: &str = "/host/proc";

impl Default for Options {
    /// The documented defaults (flag defaults), not Go zero values.
    fn default() -> Options {
        Options {
            enabled: true,
            node_name: String::new(),
            label_key: DEFAULT_LABEL_KEY.into(),
            label_value: DEFAULT_LABEL_VALUE.into(),
            repair_pods: false,
            delete_pods: false,
            label_pods: false,
            sidecar_annotation: DEFAULT_SIDECAR_ANNOTATION.into(),
            init_container_name: DEFAULT_INIT_CONTAINER.into(),
            init_termination_msg: String::new(),
            init_exit_code: VALIDATION_ERROR_CODE,
            label_selectors: String::new(),
            field_selectors: String::new(),
        }
    }
}

impl Options {
    /// Whether any action mode is on (otherwise broken pods are only logged).
    pub fn any_mode(&self) -> bool {
        self.repair_pods || self.delete_pods || self.label_pods
    }

    /// The field selector sent to the API server: the configured one, then always `spec.nodeName=<node>`
    /// (master's rule; an empty node name selects only unscheduled pods, as upstream).
    pub fn effective_field_selector(&self) -> String {
        let node = format!("spec.nodeName={}", self.node_name);
        let extra = self.field_selectors.trim().trim_end_matches(',');
        if extra.is_empty() {
            node
        } else {
            format!("{extra},{node}")
        }
    }
}

/// One setting: its flag names (master, 1.9), env names (master first) and what it sets.
pub struct Setting {
    pub flags: &'static [&'static str],
    pub envs: &'static [&'static str],
    pub kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Enabled,
    NodeName,
    LabelKey,
    LabelValue,
    RepairPods,
    DeletePods,
    LabelPods,
    SidecarAnnotation,
    InitContainerName,
    InitTerminationMsg,
    InitExitCode,
    LabelSelectors,
    FieldSelectors,
    RunAsDaemon,
}

macro_rules! setting {
    ($kind:ident, [$($f:literal),*], [$($e:literal),*]) => {
        Setting { flags: &[$($f),*], envs: &[$($e),*], kind: Kind::$kind }
    };
}

/// Every repair setting with all of its names across eras.
pub const SETTINGS: &[Setting] = &[
    setting!(Enabled, ["repair-enabled"], ["REPAIR_ENABLED"]),
    setting!(
        NodeName,
        ["repair-node-name", "node-name"],
        ["REPAIR_NODE_NAME", "REPAIR_NODE-NAME"]
    ),
    setting!(
        LabelKey,
        ["repair-broken-pod-label-key", "broken-pod-label-key"],
        ["REPAIR_BROKEN_POD_LABEL_KEY", "REPAIR_BROKEN-POD-LABEL-KEY"]
    ),
    setting!(
        LabelValue,
        ["repair-broken-pod-label-value", "broken-pod-label-value"],
        [
            "REPAIR_BROKEN_POD_LABEL_VALUE",
            "REPAIR_BROKEN-POD-LABEL-VALUE"
        ]
    ),
    setting!(
        RepairPods,
        ["repair-repair-pods", "repair-pods"],
        ["REPAIR_REPAIR_PODS", "REPAIR_REPAIR-PODS"]
    ),
    setting!(
        DeletePods,
        ["repair-delete-pods", "delete-pods"],
        ["REPAIR_DELETE_PODS", "REPAIR_DELETE-PODS"]
    ),
    setting!(
        LabelPods,
        ["repair-label-pods", "label-pods"],
        ["REPAIR_LABEL_PODS", "REPAIR_LABEL-PODS"]
    ),
    setting!(
        SidecarAnnotation,
        ["repair-sidecar-annotation", "sidecar-annotation"],
        ["REPAIR_SIDECAR_ANNOTATION", "REPAIR_SIDECAR-ANNOTATION"]
    ),
    setting!(
        InitContainerName,
        ["repair-init-container-name", "init-container-name"],
        ["REPAIR_INIT_CONTAINER_NAME", "REPAIR_INIT-CONTAINER-NAME"]
    ),
    setting!(
        InitTerminationMsg,
        [
            "repair-init-container-termination-message",
            "init-container-termination-message"
        ],
        [
            "REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE",
            "REPAIR_INIT-CONTAINER-TERMINATION-MESSAGE"
        ]
    ),
    setting!(
        InitExitCode,
        [
            "repair-init-container-exit-code",
            "init-container-exit-code"
        ],
        [
            "REPAIR_INIT_CONTAINER_EXIT_CODE",
            "REPAIR_INIT-CONTAINER-EXIT-CODE"
        ]
    ),
    setting!(
        LabelSelectors,
        ["repair-label-selectors", "label-selectors"],
        ["REPAIR_LABEL_SELECTORS", "REPAIR_LABEL-SELECTORS"]
    ),
    setting!(
        FieldSelectors,
        ["repair-field-selectors", "field-selectors"],
        ["REPAIR_FIELD_SELECTORS", "REPAIR_FIELD-SELECTORS"]
    ),
    setting!(
        RunAsDaemon,
        ["repair-run-as-daemon", "run-as-daemon"],
        ["REPAIR_RUN_AS_DAEMON", "REPAIR_RUN-AS-DAEMON"]
    ),
];

/// Whether a flag name (without `--`) is a boolean repair flag (may appear bare or as `--flag=false`).
pub fn is_bool_flag(name: &str) -> bool {
    SETTINGS.iter().any(|s| {
        s.flags.contains(&name)
            && matches!(
                s.kind,
                Kind::Enabled
                    | Kind::RepairPods
                    | Kind::DeletePods
                    | Kind::LabelPods
                    | Kind::RunAsDaemon
            )
    })
}

/// The standalone agent's settings from explicit flags (`flag(name)` → value) and env, which it reads
/// as release-1.9's viper did (an empty value is unset); also whether to run as a daemon (default true).
pub fn resolve(flag: &dyn Fn(&str) -> Option<String>, env: Env<'_>) -> Result<(Options, bool)> {
    read(flag, env, Reader::Agent)
}

/// Who reads the settings. The one difference is deliberate, each side as its upstream reads them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// The standalone agent: flags and env, an env var set to "" is unset (viper's default, release-1.9).
    Agent,
    /// `install-cni` with `REPAIR_ENABLED`: env only, as master's installer with `AllowEmptyEnv(true)`:
    /// `REPAIR_SIDECAR_ANNOTATION=""` is the empty annotation (every pod), a blank boolean or exit code
    /// keeps its default. `REPAIR_RUN_AS_DAEMON` is not read (master sets it, unused).
    Installer,
}

fn read(
    flag: &dyn Fn(&str) -> Option<String>,
    env: Env<'_>,
    reader: Reader,
) -> Result<(Options, bool)> {
    let empty = match reader {
        Reader::Agent => EmptyEnv::Unset,
        Reader::Installer => EmptyEnv::Value,
    };
    let mut o = Options::default();
    let mut daemon = true;
    for s in SETTINGS {
        if reader == Reader::Installer && s.kind == Kind::RunAsDaemon {
            continue;
        }
        let from_flag = s
            .flags
            .iter()
            .find_map(|f| flag(f).map(|v| (format!("--{f}"), v)));
        let Some(found) = settings::pick(from_flag, env, s.envs, empty) else {
            continue;
        };
        let bool_of = |d: bool| settings::typed(Some(found.clone()), d, settings::parse_bool);
        let value = found.value.clone();
        match s.kind {
            Kind::Enabled => o.enabled = bool_of(o.enabled)?,
            Kind::RepairPods => o.repair_pods = bool_of(o.repair_pods)?,
            Kind::DeletePods => o.delete_pods = bool_of(o.delete_pods)?,
            Kind::LabelPods => o.label_pods = bool_of(o.label_pods)?,
            Kind::RunAsDaemon => daemon = bool_of(daemon)?,
            Kind::NodeName => o.node_name = value,
            Kind::LabelKey => o.label_key = value,
            Kind::LabelValue => o.label_value = value,
            Kind::SidecarAnnotation => o.sidecar_annotation = value,
            Kind::InitContainerName => o.init_container_name = value,
            Kind::InitTerminationMsg => o.init_termination_msg = value,
            Kind::LabelSelectors => o.label_selectors = value,
            Kind::FieldSelectors => o.field_selectors = value,
            Kind::InitExitCode => {
                o.init_exit_code = settings::typed(Some(found), o.init_exit_code, exit_code)?
            }
        }
    }
    if o.label_pods && !o.repair_pods && !o.delete_pods && o.label_key.is_empty() {
        return Err(Error::config(
            "repair: label mode needs a label key (broken-pod-label-key is empty)",
        ));
    }
    Ok((o, daemon))
}

fn exit_code(source: &str, v: &str) -> Result<i64> {
    v.trim()
        .parse::<i32>()
        .map(i64::from)
        .map_err(|_| Error::env(source, format!("{v:?} is not an integer exit code")))
}

/// The standalone agent's settings from the environment only (empty values ignored, as release-1.9).
pub fn from_env(env: Env<'_>) -> Result<Options> {
    read(&|_| None, env, Reader::Agent).map(|(o, _)| o)
}

/// The in-installer agent's settings (`install-cni` with `REPAIR_ENABLED`; see `Reader::Installer`).
pub fn from_installer_env(env: Env<'_>) -> Result<Options> {
    read(&|_| None, env, Reader::Installer).map(|(o, _)| o)
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
