//! Whether a pod gets sidecar redirection: upstream master's `CmdAdd` selection rules (plugin.md §2.2 step 9),
//! first match wins. The shortcuts that need no pod object (own agent, not a pod, excluded namespace) are in
//! `plugin::add::shortcut`.

use super::keys::{DISABLE_ENVOY, INJECT_KEY, STATUS_KEY};
use super::pod::PodInfo;
use super::values::parse_bool;

/// The legacy init container that programs iptables itself.
pub const ISTIO_INIT: &str = "istio-init";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Program the sidecar redirection.
    Redirect,
    /// Leave the pod alone; a human-readable reason.
    Skip(String),
}

pub fn decide(pod: &PodInfo) -> Decision {
    let skip = |s: &str| Decision::Skip(s.to_string());
    // 1. istio-init (init or regular container) does its own iptables.
    if pod.all_container_names().any(|n| n == ISTIO_INIT) {
        return skip("pod has an istio-init container");
    }
    // 2. DISABLE_ENVOY on the proxy container.
    if let Some(p) = &pod.proxy {
        if let Some(v) = p.env.get(DISABLE_ENVOY) {
            if parse_bool(v) == Some(true) {
                return Decision::Skip(format!("istio-proxy has DISABLE_ENVOY={v}"));
            }
        }
    }
    // 3. No sidecar container at all.
    let proxy = match &pod.proxy {
        Some(p) => p,
        None => return skip("pod has no istio-proxy container"),
    };
    // 4. A gateway or other non-sidecar proxy.
    if !proxy.proxy_type.is_empty() && proxy.proxy_type != "sidecar" {
        return Decision::Skip(format!(
            "istio-proxy runs as proxy type {:?}, not sidecar",
            proxy.proxy_type
        ));
    }
    // 5. Inject opt-out: the label wins when its key exists (even empty), else the annotation.
    let (inject, source) = match pod.labels.get(INJECT_KEY) {
        Some(v) => (v.as_str(), "label"),
        None => (
            pod.annotations
                .get(INJECT_KEY)
                .map(String::as_str)
                .unwrap_or(""),
            "annotation",
        ),
    };
    if !inject.is_empty() && parse_bool(inject) == Some(false) {
        return Decision::Skip(format!("{source} {INJECT_KEY}={inject}"));
    }
    // 6. Not injected (no status annotation).
    if !pod.annotations.contains_key(STATUS_KEY) {
        return Decision::Skip(format!("pod has no {STATUS_KEY} annotation"));
    }
    Decision::Redirect
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redirect::pod::ProxyContainer;

    fn injected() -> PodInfo {
        let mut p = PodInfo {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec!["test".into(), "istio-proxy".into(), "istio-validate".into()],
            proxy: Some(ProxyContainer::default()),
            ..PodInfo::default()
        };
        p.annotations.insert(STATUS_KEY.into(), "true".into());
        p
    }

    fn is_skip(d: &Decision, needle: &str) -> bool {
        matches!(d, Decision::Skip(r) if r.contains(needle))
    }

    #[test]
    fn injected_pod_is_redirected() {
        assert_eq!(decide(&injected()), Decision::Redirect);
        // The status value is irrelevant, even empty.
        let mut p = injected();
        p.annotations.insert(STATUS_KEY.into(), "".into());
        assert_eq!(decide(&p), Decision::Redirect);
    }

    #[test]
    fn rule1_istio_init_in_either_list() {
        let mut p = injected();
        p.init_containers.push(ISTIO_INIT.into());
        assert!(is_skip(&decide(&p), "istio-init"));
        let mut p = injected();
        p.containers.push(ISTIO_INIT.into());
        assert!(is_skip(&decide(&p), "istio-init"));
        // istio-init wins over everything else (upstream's DISABLE_ENVOY test really hits this rule).
        let mut p = injected();
        p.containers.push(ISTIO_INIT.into());
        p.proxy = None;
        assert!(is_skip(&decide(&p), "istio-init"));
    }

    #[test]
    fn rule2_disable_envoy_parse_bool() {
        let with = |v: &str| {
            let mut p = injected();
            let proxy = p.proxy.as_mut().unwrap();
            proxy.env.insert("DISABLE_ENVOY".into(), v.into());
            p
        };
        for v in ["true", "1", "T", "TRUE", "True", "t"] {
            assert!(is_skip(&decide(&with(v)), "DISABLE_ENVOY"), "{v}");
        }
        for v in ["false", "0", "yes", "", "tRUE"] {
            assert_eq!(decide(&with(v)), Decision::Redirect, "{v}");
        }
    }

    #[test]
    fn rule3_no_proxy_container() {
        let mut p = injected();
        p.proxy = None;
        assert!(is_skip(&decide(&p), "no istio-proxy"));
    }

    #[test]
    fn rule4_proxy_type() {
        let mut p = injected();
        p.proxy.as_mut().unwrap().proxy_type = "router".into();
        assert!(is_skip(&decide(&p), "router"));
        p.proxy.as_mut().unwrap().proxy_type = "sidecar".into();
        assert_eq!(decide(&p), Decision::Redirect);
    }

    #[test]
    fn rule5_inject_label_then_annotation() {
        let mut p = injected();
        p.annotations.insert(INJECT_KEY.into(), "false".into());
        assert!(is_skip(&decide(&p), "annotation"));
        // The label key wins even when empty.
        p.labels.insert(INJECT_KEY.into(), "".into());
        assert_eq!(decide(&p), Decision::Redirect);
        p.labels.insert(INJECT_KEY.into(), "F".into());
        assert!(is_skip(&decide(&p), "label"));
        // Unparsable values are ignored.
        p.labels.insert(INJECT_KEY.into(), "nope".into());
        assert_eq!(decide(&p), Decision::Redirect);
        p.labels.insert(INJECT_KEY.into(), "true".into());
        assert_eq!(decide(&p), Decision::Redirect);
    }

    #[test]
    fn rule6_status_annotation_required() {
        let mut p = injected();
        p.annotations.clear();
        assert!(is_skip(&decide(&p), STATUS_KEY));
    }
}
