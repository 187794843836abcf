//! `CNI_ARGS` (`K=V;K=V`), parsed with libcni's `LoadArgs` semantics into Istio's `K8sArgs`:
//! every pair needs exactly one `=`, unknown keys are an error unless `IgnoreUnknown` is `1` or `true` (in any
//! case, as libcni's `UnmarshallableBool` lower-cases it),
//! and keys may come in any order (containerd builds them from a Go map).

use crate::error::{Error, Result};

/// The Kubernetes keys kubelet/containerd/CRI-O put into `CNI_ARGS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct K8sArgs {
    pub ignore_unknown: bool,
    pub pod_name: String,
    pub pod_namespace: String,
    pub infra_container_id: String,
    pub pod_uid: String,
}

impl K8sArgs {
    pub fn parse(args: &str) -> Result<K8sArgs> {
        let mut out = K8sArgs::default();
        if args.is_empty() {
            return Ok(out);
        }
        let mut pairs = Vec::new();
        for pair in args.split(';') {
            let mut kv = pair.split('=');
            match (kv.next(), kv.next(), kv.next()) {
                (Some(k), Some(v), None) => pairs.push((k, v)),
                _ => {
                    return Err(Error::Decode(format!(
                        "CNI_ARGS: invalid pair {pair:?} (expected KEY=VALUE separated by ';')"
                    )))
                }
            }
        }
        // IgnoreUnknown first, whatever its position.
        for (k, v) in &pairs {
            if *k == "IgnoreUnknown" {
                // libcni's UnmarshallableBool lower-cases the value first (no letter outside ASCII
                // lower-cases to one of these), so `TRUE` counts as it does there.
                out.ignore_unknown = match v.to_ascii_lowercase().as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => {
                        return Err(Error::Decode(format!(
                            "CNI_ARGS: IgnoreUnknown={v:?} is not a boolean (1, true, 0 or false, in any case)"
                        )))
                    }
                };
            }
        }
        let mut unknown = Vec::new();
        for (k, v) in pairs {
            // The environment is read lossily (crate::plugin::run_cni): a byte that was not UTF-8 is U+FFFD
            // here, and no pod is named with one (Kubernetes names and UIDs are ASCII).
            if k.starts_with("K8S_POD_") && v.contains(char::REPLACEMENT_CHARACTER) {
                return Err(Error::Decode(format!(
                    "CNI_ARGS: {k} is not valid UTF-8 (or holds U+FFFD): {}",
                    crate::error::quoted(v)
                )));
            }
            let v = v.to_string();
            match k {
                "IgnoreUnknown" => {}
                "K8S_POD_NAME" => out.pod_name = v,
                "K8S_POD_NAMESPACE" => out.pod_namespace = v,
                "K8S_POD_INFRA_CONTAINER_ID" => out.infra_container_id = v,
                "K8S_POD_UID" => out.pod_uid = v,
                other => unknown.push(other.to_string()),
            }
        }
        if !unknown.is_empty() && !out.ignore_unknown {
            return Err(Error::Decode(format!(
                "CNI_ARGS: unknown keys {unknown:?} (set IgnoreUnknown=1 to allow them)"
            )));
        }
        Ok(out)
    }

    /// A Kubernetes pod has both a name and a namespace.
    pub fn is_pod(&self) -> bool {
        !self.pod_name.is_empty() && !self.pod_namespace.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_keys_in_any_order() {
        let keys = [
            "K8S_POD_NAMESPACE=ns",
            "K8S_POD_NAME=p",
            "K8S_POD_INFRA_CONTAINER_ID=cid",
            "K8S_POD_UID=u-1",
            "IgnoreUnknown=1",
        ];
        // Every rotation, and the reverse, parse to the same value.
        let want = K8sArgs {
            ignore_unknown: true,
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            infra_container_id: "cid".into(),
            pod_uid: "u-1".into(),
        };
        for r in 0..keys.len() {
            let mut k = keys.to_vec();
            k.rotate_left(r);
            assert_eq!(K8sArgs::parse(&k.join(";")).unwrap(), want);
            k.reverse();
            assert_eq!(K8sArgs::parse(&k.join(";")).unwrap(), want);
        }
    }

    #[test]
    fn unknown_keys_need_ignore_unknown() {
        let e = K8sArgs::parse("K8S_POD_NAME=a;FOO=b").unwrap_err();
        assert_eq!(e.cni_code(), 6);
        assert!(e.to_string().contains("FOO"));
        assert!(K8sArgs::parse("FOO=b;IgnoreUnknown=true").is_ok());
        assert!(K8sArgs::parse("IgnoreUnknown=True;FOO=b").is_ok());
        // libcni lower-cases the value first.
        assert!(K8sArgs::parse("IgnoreUnknown=TRUE;FOO=b").is_ok());
        assert!(K8sArgs::parse("IgnoreUnknown=tRuE;FOO=b").is_ok());
        assert!(K8sArgs::parse("IgnoreUnknown=FALSE;FOO=b").is_err());
        assert!(K8sArgs::parse("IgnoreUnknown=FALSE;K8S_POD_NAME=a").is_ok());
        // libcni: "yes" is not a boolean
        assert!(K8sArgs::parse("IgnoreUnknown=yes").is_err());
        assert!(K8sArgs::parse("IgnoreUnknown=0;FOO=b").is_err());
    }

    #[test]
    fn malformed_pairs() {
        for bad in [
            "K8S_POD_NAME=a;",
            "A=B=C",
            "novalue",
            ";",
            "K8S_POD_NAME=a;;K8S_POD_NAMESPACE=b",
        ] {
            let e = K8sArgs::parse(bad).unwrap_err();
            assert!(e.to_string().contains("invalid pair"), "{bad}: {e}");
        }
    }

    #[test]
    fn pod_values_holding_u_fffd_name_no_pod() {
        for bad in [
            "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\u{FFFD}",
            "K8S_POD_NAMESPACE=\u{FFFD};K8S_POD_NAME=web",
            "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=\u{FFFD}",
        ] {
            let e = K8sArgs::parse(bad).unwrap_err();
            assert!(e.to_string().contains("UTF-8"), "{bad}: {e}");
        }
        // Elsewhere (an ignored pair) it is just a value, as in libcni.
        let a = K8sArgs::parse("IgnoreUnknown=1;FOO=\u{FFFD};K8S_POD_NAMESPACE=n;K8S_POD_NAME=p")
            .unwrap();
        assert!(a.is_pod());
    }

    #[test]
    fn empty_and_partial() {
        assert!(!K8sArgs::parse("").unwrap().is_pod());
        assert!(!K8sArgs::parse("K8S_POD_NAME=a").unwrap().is_pod());
        assert!(K8sArgs::parse("K8S_POD_NAME=a;K8S_POD_NAMESPACE=b")
            .unwrap()
            .is_pod());
        // empty values are allowed by libcni
        assert_eq!(K8sArgs::parse("K8S_POD_NAME=").unwrap().pod_name, "");
    }
}
