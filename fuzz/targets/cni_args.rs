//! CNI_ARGS (`K=V;K=V`): any text parses or gives an error naming CNI_ARGS, never a panic; a parsed pod
//! re-serialised in any key order parses to the same value.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::cni::K8sArgs;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match K8sArgs::parse(text) {
        Ok(a) => {
            // Round trip through the canonical form, reversed order.
            let mut pairs = [
                format!("K8S_POD_NAME={}", a.pod_name),
                format!("K8S_POD_NAMESPACE={}", a.pod_namespace),
                format!("K8S_POD_INFRA_CONTAINER_ID={}", a.infra_container_id),
                format!("K8S_POD_UID={}", a.pod_uid),
                format!("IgnoreUnknown={}", a.ignore_unknown),
            ];
            if pairs
                .iter()
                .all(|p| !p[p.find('=').unwrap() + 1..].contains([';', '=']))
            {
                pairs.reverse();
                let b = K8sArgs::parse(&pairs.join(";")).expect("canonical form parses");
                assert_eq!(a, b);
            }
        }
        Err(e) => assert!(e.to_string().contains("CNI_ARGS"), "{e}"),
    }
}
