//! Validation of the installed state, upstream master's `checkValidCNIConfig` (installer.md §2.10), pure:
//! the caller lists the conf dir and provides a reader.

use super::conflist::{self, PLUGIN_TYPE};
use super::select::Listing;
use crate::error::Result;
use crate::json::{self, Value};

/// What the check needs to know about the installer's state.
#[derive(Debug, Clone)]
pub struct CheckCtx<'a> {
    /// The conf dir as printed in messages.
    pub dir: &'a str,
    pub chained: bool,
    /// The Istio-owned file name when owned mode is on.
    pub owned: Option<&'a str>,
    /// CNI_CONF_NAME (or the name pinned after the first check).
    pub configured: Option<&'a str>,
    /// The file the Istio configuration was last written to (a name in `dir`).
    pub installed: Option<&'a str>,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Installed and valid; `warning` reports a preemption that upstream master only warns about.
    Valid { warning: Option<String> },
    /// A (re)install is needed; `pin` is the name upstream pins as CNI_CONF_NAME.
    Invalid { reason: String, pin: Option<String> },
}

fn invalid(reason: impl Into<String>) -> Outcome {
    Outcome::Invalid {
        reason: reason.into(),
        pin: None,
    }
}

/// Runs the check. `read(name)` returns the content of `<dir>/<name>`, `None` when missing.
pub fn check(
    ctx: &CheckCtx<'_>,
    listing: &Result<Listing>,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Outcome {
    let valid = match listing {
        Ok(l) => &l.valid,
        Err(e) => return invalid(e.to_string()),
    };
    let Some(first) = valid.first() else {
        return invalid(format!("no networks found in {}", ctx.dir));
    };
    if let Some(owned) = ctx.owned {
        if first != owned {
            return invalid(format!(
                "istio owned CNI config does not exist or is not the highest priority. Got {first} instead"
            ));
        }
    }
    let path_of = |n: &str| format!("{}/{}", ctx.dir, n);
    let installed_path = ctx.installed.map(path_of).unwrap_or_default();
    let mut warning = None;
    if Some(first.as_str()) != ctx.installed {
        if ctx.configured.is_none() && ctx.chained {
            let pin = if ctx.owned.is_some() {
                valid.get(1).cloned()
            } else {
                Some(first.clone())
            };
            return Outcome::Invalid {
                reason: format!(
                    "perform initial update of highest priority config {} using existing configuration from file {}",
                    path_of(first),
                    pin.as_deref().unwrap_or("")
                ),
                pin,
            };
        }
        warning = Some(format!(
            "CNI config file \"{installed_path}\" preempted by \"{}\"",
            path_of(first)
        ));
    }
    let Some(installed) = ctx.installed else {
        return invalid(format!("CNI config file removed: {installed_path}"));
    };
    let Some(bytes) = read(installed) else {
        return invalid(format!("CNI config file removed: {installed_path}"));
    };
    let text = String::from_utf8_lossy(&bytes);
    let obj = match json::parse(&text, &installed_path) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return invalid(format!("{installed_path}: not a JSON object")),
        Err(e) => return invalid(e.to_string()),
    };
    if !ctx.chained {
        if json::str_of(&obj, "type") != Some(PLUGIN_TYPE) {
            return invalid(format!(
                "istio-cni CNI config file modified: {installed_path}"
            ));
        }
        return Outcome::Valid { warning };
    }
    let Some(plugins) = json::arr_of(&obj, "plugins") else {
        return invalid(format!(
            "{installed_path}: error reading plugin list from CNI config"
        ));
    };
    let mut types = Vec::new();
    for p in plugins.iter() {
        let Value::Object(po) = p else {
            return invalid(format!(
                "{installed_path}: error reading plugin from CNI config plugin list"
            ));
        };
        match po.get("type") {
            Some(Value::String(t)) => types.push(t.clone()),
            Some(other) => {
                return invalid(format!(
                    "plugin type {} not a string",
                    json::to_compact(other)
                ))
            }
            None => return invalid("plugin type <nil> not a string"),
        }
    }
    if !types.iter().any(|t| t == PLUGIN_TYPE) {
        return invalid(format!(
            "istio-cni plugin not found in Istio CNI config at {installed_path}"
        ));
    }
    if let Some(owned) = ctx.owned {
        let primary = ctx
            .configured
            .filter(|c| *c != owned)
            .map(str::to_string)
            .or_else(|| valid.iter().find(|n| n.as_str() != owned).cloned());
        if let Some(primary) = primary {
            if let Some(pbytes) = read(&primary) {
                match conflist::plugin_types(&String::from_utf8_lossy(&pbytes), &path_of(&primary))
                {
                    Ok(ptypes) => {
                        for t in ptypes {
                            if !types.contains(&t) {
                                return invalid(format!(
                                    "plugin of type {t} from primary CNI config is missing in Istio CNI config file"
                                ));
                            }
                        }
                    }
                    Err(e) => return invalid(e.to_string()),
                }
            }
        }
    }
    Outcome::Valid { warning }
}
