//! What the decision and the redirect need from a Kubernetes Pod object (upstream `ExtractPodInfo`):
//! names, the labels and annotations they read ([`READ_LABELS`], [`READ_ANNOTATIONS`]), container names
//! (init containers first), the `istio-proxy` container's literal env values they read
//! ([`READ_PROXY_ENV`]), proxy type and securityContext ids, and the pod's IPs.
//!
//! Only those keys are read (and validated), so the node's pod cache can keep exactly them
//! ([`super::reduce`]) and a cached pod decides exactly as the API server's object does.

use super::keys::*;
use crate::error::{Error, Result};
use crate::json::{Object, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Name of the sidecar container.
pub const PROXY_CONTAINER: &str = "istio-proxy";

/// The labels the decision reads.
pub const READ_LABELS: [&str; 1] = [INJECT_KEY];

/// The annotations the decision and the redirect configuration read.
pub const READ_ANNOTATIONS: [&str; 12] = [
    STATUS_KEY,
    INJECT_KEY,
    INTERCEPTION_MODE,
    INCLUDE_OUTBOUND_IP_RANGES,
    EXCLUDE_OUTBOUND_IP_RANGES,
    EXCLUDE_INBOUND_PORTS,
    INCLUDE_INBOUND_PORTS,
    EXCLUDE_OUTBOUND_PORTS,
    INCLUDE_OUTBOUND_PORTS,
    EXCLUDE_INTERFACES,
    REROUTE_VIRTUAL_INTERFACES,
    KUBEVIRT_INTERFACES,
];

/// The `istio-proxy` env variables the decision and the redirect configuration read.
pub const READ_PROXY_ENV: [&str; 4] = [
    DISABLE_ENVOY,
    DNS_CAPTURE_ENV,
    DUAL_STACK_ENV,
    INVALID_DROP_ENV,
];

/// Facts about the `istio-proxy` container (a regular container or a native-sidecar init container).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyContainer {
    /// Literal env values by name, for the names in [`READ_PROXY_ENV`] (`valueFrom` entries give ""); a
    /// later duplicate wins, as in a Go map.
    pub env: BTreeMap<String, String>,
    /// `args[1]` when `args[0] == "proxy"` (e.g. `sidecar`, `router`); "" otherwise.
    pub proxy_type: String,
    /// `securityContext.runAsUser` of this container (the pod-level securityContext is ignored).
    pub run_as_user: Option<i64>,
    /// `securityContext.runAsGroup` of this container.
    pub run_as_group: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    /// The labels in [`READ_LABELS`].
    pub labels: BTreeMap<String, String>,
    /// The annotations in [`READ_ANNOTATIONS`].
    pub annotations: BTreeMap<String, String>,
    pub init_containers: Vec<String>,
    pub containers: Vec<String>,
    /// `None` when the pod has no container named `istio-proxy`.
    pub proxy: Option<ProxyContainer>,
    /// `status.podIPs[].ip`, then `status.podIP` if not already listed.
    pub pod_ips: Vec<IpAddr>,
}

fn bad(field: &str, want: &str) -> Error {
    Error::Decode(format!("pod: field {field} must be {want}"))
}

fn opt_obj<'a>(o: &'a Object, key: &str, field: &str) -> Result<Option<&'a Object>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(x)) => Ok(Some(x)),
        Some(_) => Err(bad(field, "an object")),
    }
}

fn opt_arr<'a>(o: &'a Object, key: &str, field: &str) -> Result<&'a [Value]> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a.as_slice()),
        Some(_) => Err(bad(field, "a list")),
    }
}

/// Calls `f` with each element of the list `key` (`field`), which must be an object, and its field name.
fn each_object(
    o: &Object,
    key: &str,
    field: &str,
    mut f: impl FnMut(&str, &Object) -> Result<()>,
) -> Result<()> {
    for (i, v) in opt_arr(o, key, field)?.iter().enumerate() {
        let at = format!("{field}[{i}]");
        match v {
            Value::Object(x) => f(&at, x)?,
            _ => return Err(bad(&at, "an object")),
        }
    }
    Ok(())
}

fn opt_str<'a>(o: &'a Object, key: &str, field: &str) -> Result<Option<&'a str>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(field, "a string")),
    }
}

fn opt_int(o: &Object, key: &str, field: &str) -> Result<Option<i64>> {
    use crate::json::Number;
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(Number::I64(i))) => Ok(Some(*i)),
        Some(Value::Number(Number::U64(u))) => i64::try_from(*u)
            .map(Some)
            .map_err(|_| bad(field, "an integer within int64")),
        Some(Value::Number(Number::F64(f))) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
            Ok(Some(*f as i64))
        }
        Some(_) => Err(bad(field, "an integer")),
    }
}

/// The `keys` of a string map (other keys are neither read nor checked).
fn string_map(o: Option<&Object>, field: &str, keys: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    if let Some(o) = o {
        for k in keys {
            match o.get(*k) {
                None => {}
                Some(Value::String(s)) => {
                    out.insert(k.to_string(), s.clone());
                }
                Some(_) => return Err(bad(&format!("{field}[{k:?}]"), "a string")),
            }
        }
    }
    Ok(out)
}

impl PodInfo {
    pub fn from_pod(pod: &Object) -> Result<PodInfo> {
        let meta = opt_obj(pod, "metadata", "metadata")?;
        let empty = Object::new();
        let meta = meta.unwrap_or(&empty);
        let mut info = PodInfo {
            name: opt_str(meta, "name", "metadata.name")?
                .unwrap_or_default()
                .to_string(),
            namespace: opt_str(meta, "namespace", "metadata.namespace")?
                .unwrap_or_default()
                .to_string(),
            labels: string_map(
                opt_obj(meta, "labels", "metadata.labels")?,
                "metadata.labels",
                &READ_LABELS,
            )?,
            annotations: string_map(
                opt_obj(meta, "annotations", "metadata.annotations")?,
                "metadata.annotations",
                &READ_ANNOTATIONS,
            )?,
            ..PodInfo::default()
        };
        let spec = opt_obj(pod, "spec", "spec")?.unwrap_or(&empty);
        for (list, out_is_init) in [("initContainers", true), ("containers", false)] {
            each_object(spec, list, &format!("spec.{list}"), |field, c| {
                let name = opt_str(c, "name", &format!("{field}.name"))?
                    .ok_or_else(|| Error::Decode(format!("pod: field {field}.name is missing")))?
                    .to_string();
                if name == PROXY_CONTAINER {
                    let proxy = info.proxy.get_or_insert_with(ProxyContainer::default);
                    read_proxy(c, field, proxy)?;
                }
                if out_is_init {
                    info.init_containers.push(name);
                } else {
                    info.containers.push(name);
                }
                Ok(())
            })?;
        }
        if let Some(status) = opt_obj(pod, "status", "status")? {
            each_object(status, "podIPs", "status.podIPs", |field, p| match opt_str(
                p,
                "ip",
                &format!("{field}.ip"),
            )? {
                Some(ip) => push_ip(&mut info.pod_ips, ip, &format!("{field}.ip")),
                None => Ok(()),
            })?;
            if let Some(ip) = opt_str(status, "podIP", "status.podIP")? {
                if !ip.is_empty() {
                    push_ip(&mut info.pod_ips, ip, "status.podIP")?;
                }
            }
        }
        Ok(info)
    }

    /// Every container and init container name.
    pub fn all_container_names(&self) -> impl Iterator<Item = &str> {
        self.init_containers
            .iter()
            .chain(self.containers.iter())
            .map(String::as_str)
    }
}

fn push_ip(ips: &mut Vec<IpAddr>, s: &str, field: &str) -> Result<()> {
    let ip: IpAddr = s
        .parse()
        .map_err(|_| Error::Decode(format!("pod: field {field}: {s:?} is not an IP address")))?;
    if !ips.contains(&ip) {
        ips.push(ip);
    }
    Ok(())
}

fn read_proxy(c: &Object, field: &str, proxy: &mut ProxyContainer) -> Result<()> {
    each_object(c, "env", &format!("{field}.env"), |ef, e| {
        let name = opt_str(e, "name", &format!("{ef}.name"))?
            .ok_or_else(|| Error::Decode(format!("pod: field {ef}.name is missing")))?;
        if READ_PROXY_ENV.contains(&name) {
            let value = opt_str(e, "value", &format!("{ef}.value"))?.unwrap_or_default();
            proxy.env.insert(name.to_string(), value.to_string());
        }
        Ok(())
    })?;
    let args = opt_arr(c, "args", &format!("{field}.args"))?;
    let arg = |i: usize| -> Result<Option<&str>> {
        match args.get(i) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(bad(&format!("{field}.args[{i}]"), "a string")),
        }
    };
    if let (Some("proxy"), Some(t)) = (arg(0)?, arg(1)?) {
        proxy.proxy_type = t.to_string();
    }
    if let Some(sc) = opt_obj(c, "securityContext", &format!("{field}.securityContext"))? {
        let sf = format!("{field}.securityContext");
        if let Some(u) = opt_int(sc, "runAsUser", &format!("{sf}.runAsUser"))? {
            proxy.run_as_user = Some(u);
        }
        if let Some(g) = opt_int(sc, "runAsGroup", &format!("{sf}.runAsGroup"))? {
            proxy.run_as_group = Some(g);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_object;

    #[test]
    fn extracts_everything() {
        let pod = parse_object(
            r#"{"metadata":{"name":"p","namespace":"ns","labels":{"a":"b","sidecar.istio.io/inject":"true"},
                "annotations":{"sidecar.istio.io/status":"{}","other":"x"}},
              "spec":{"initContainers":[{"name":"istio-proxy","restartPolicy":"Always",
                  "args":["proxy","sidecar"],
                  "env":[{"name":"ISTIO_DUAL_STACK","value":"1"},{"name":"INVALID_DROP","valueFrom":{"fieldRef":{}}},
                         {"name":"UNREAD","value":"x"}],
                  "securityContext":{"runAsUser":1000,"runAsGroup":2000}}],
                "containers":[{"name":"app"}]},
              "status":{"podIP":"10.0.0.2","podIPs":[{"ip":"fd00::2"},{"ip":"10.0.0.2"}]}}"#,
            "t",
        )
        .unwrap();
        let i = PodInfo::from_pod(&pod).unwrap();
        assert_eq!((i.name.as_str(), i.namespace.as_str()), ("p", "ns"));
        assert_eq!(i.init_containers, vec!["istio-proxy"]);
        assert_eq!(i.containers, vec!["app"]);
        let p = i.proxy.unwrap();
        assert_eq!(p.proxy_type, "sidecar");
        assert_eq!(p.env.get("ISTIO_DUAL_STACK").map(String::as_str), Some("1"));
        assert_eq!(p.env.get("INVALID_DROP").map(String::as_str), Some(""));
        // What the decision never reads is not kept.
        assert_eq!(p.env.len(), 2);
        assert_eq!((p.run_as_user, p.run_as_group), (Some(1000), Some(2000)));
        assert_eq!(
            i.pod_ips,
            vec![
                "fd00::2".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert_eq!(
            i.labels.get("sidecar.istio.io/inject").map(String::as_str),
            Some("true")
        );
        assert_eq!((i.labels.len(), i.annotations.len()), (1, 1));
    }

    #[test]
    fn minimal_pod_is_fine() {
        let i = PodInfo::from_pod(&parse_object("{}", "t").unwrap()).unwrap();
        assert!(i.proxy.is_none() && i.containers.is_empty() && i.pod_ips.is_empty());
    }

    #[test]
    fn malformed_shapes_name_the_field() {
        for (doc, field) in [
            (
                r#"{"metadata":{"annotations":{"sidecar.istio.io/status":1}}}"#,
                "metadata.annotations",
            ),
            (r#"{"metadata":{"labels":[]}}"#, "metadata.labels"),
            (r#"{"spec":{"containers":{}}}"#, "spec.containers"),
            (r#"{"spec":{"containers":[{}]}}"#, "spec.containers[0].name"),
            (
                r#"{"spec":{"containers":[{"name":"istio-proxy","securityContext":{"runAsUser":"x"}}]}}"#,
                "runAsUser",
            ),
            (
                r#"{"spec":{"containers":[{"name":"istio-proxy","env":[{"name":"INVALID_DROP","value":3}]}]}}"#,
                "env[0].value",
            ),
            (r#"{"status":{"podIP":"10.0.0.300"}}"#, "status.podIP"),
            (
                r#"{"status":{"podIPs":[{"ip":"x"}]}}"#,
                "status.podIPs[0].ip",
            ),
        ] {
            let e = PodInfo::from_pod(&parse_object(doc, "t").unwrap()).unwrap_err();
            assert!(e.to_string().contains(field), "{doc}: {e}");
            assert_eq!(e.cni_code(), 6);
        }
    }
}
