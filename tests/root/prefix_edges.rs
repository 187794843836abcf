//! Annotation prefixes at the edges of the address encodings, in real namespaces (root): `/0` (no whole byte
//! to compare: nft loads the whole address and masks it to zero; iptables matches nothing) and host bits set
//! (`10.0.0.1/8`, masked). In nftables mode what ADD programs over netlink must list like `istio-cni explain
//! --nft` loaded with `nft -f`, and our CHECK must accept the reference; on both backends the plugin's ADD
//! and CHECK succeed and the traffic goes where the annotation says.

use crate::nft_netns::{listing, load_reference};
use crate::support::e2e::{Backend, Node};
use crate::support::traffic::outbound_captured;
use crate::support::{explain_nft_script, require_root, Netns, TempDir};
use istio_cni::json;
use istio_cni::nftables::apply::{apply, check};
use istio_cni::nftables::generate;
use istio_cni::redirect::plan::{capture, decide_pod, Addresses, NodeEnv, PodPlan};
use istio_cni::redirect::PodInfo;
use std::ffi::OsStr;

const CONF: &str =
    r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"istio-cni","native_nftables":true}"#;

fn pod(annotations: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns","annotations":{{
            "sidecar.istio.io/status":"{{}}"{annotations}}}}},
          "spec":{{"containers":[{{"name":"app"}},{{"name":"istio-proxy",
            "env":[{{"name":"ISTIO_DUAL_STACK","value":"true"}}]}}]}},
          "status":{{"podIPs":[{{"ip":"10.0.0.2"}},{{"ip":"fd00::2"}}]}}}}"#
    )
}

#[test]
fn zero_length_and_host_bit_prefixes_program_like_nft() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("nft-prefix");
    let conf = tmp.write("conf.json", CONF);
    for (name, annotations) in [
        (
            "include-zero",
            r#","traffic.sidecar.istio.io/includeOutboundIPRanges":"0.0.0.0/0,::/0",
               "istio.io/reroute-virtual-interfaces":"net1""#,
        ),
        (
            "exclude-zero",
            r#","traffic.sidecar.istio.io/excludeOutboundIPRanges":"0.0.0.0/0,::/0""#,
        ),
        (
            "host-bits",
            r#","traffic.sidecar.istio.io/includeOutboundIPRanges":"10.0.0.1/8,10.1.2.3/12,fd00::1/8",
               "traffic.sidecar.istio.io/excludeOutboundIPRanges":"10.9.9.9/16,fd00:1::1/33""#,
        ),
    ] {
        let text = pod(annotations);
        let info = PodInfo::from_pod(&json::parse_object(&text, "pod").unwrap()).unwrap();
        let redirect = match decide_pod(&info).unwrap() {
            PodPlan::Redirect(r) => r,
            PodPlan::Skip(why) => panic!("{name}: skipped: {why}"),
        };
        let cfg = capture(
            &redirect,
            Addresses::PodIps(&info.pod_ips),
            &NodeEnv::default(),
        )
        .unwrap();
        assert!(cfg.enable_ipv6, "{name}");
        let rs = generate(&cfg).unwrap().ruleset();
        let ours = Netns::new("nftpfx");
        apply(
            &ours.path(),
            rs.clone(),
            cfg.enable_ipv6,
            cfg.tproxy_route(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        check(&ours.path(), rs.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));

        let pod_file = tmp.write(format!("{name}.json"), &text);
        let script = explain_nft_script(
            name,
            &[
                OsStr::new("--pod"),
                pod_file.as_os_str(),
                OsStr::new("--conf"),
                conf.as_os_str(),
            ],
        );
        let file = tmp.write(format!("{name}.nft"), script);
        let reference = Netns::new("nftpfxref");
        load_reference(&reference, &file, &tmp);
        assert_eq!(listing(&ours), listing(&reference), "{name}");
        check(&reference.path(), rs).unwrap_or_else(|e| panic!("{name}: reference: {e}"));
    }
}

#[test]
fn zero_length_prefixes_capture_and_exclude_everything_on_both_backends() {
    if !require_root() {
        return;
    }
    // iptables mode through each x_tables backend (the record the installer writes), then nftables mode.
    for (b, (record, backend)) in [
        ("nft", Backend::Iptables),
        ("legacy", Backend::Iptables),
        ("nft", Backend::Nftables),
    ]
    .into_iter()
    .enumerate()
    {
        let node = Node::new(121 + b as u8);
        node.record_backend(record);
        for (i, (ann, captured)) in [
            (
                r#""traffic.sidecar.istio.io/includeOutboundIPRanges": "0.0.0.0/0""#,
                true,
            ),
            (
                r#""traffic.sidecar.istio.io/includeOutboundIPRanges": "10.252.121.7/8""#,
                true,
            ),
            (
                r#""traffic.sidecar.istio.io/excludeOutboundIPRanges": "0.0.0.0/0""#,
                false,
            ),
            // Repeated entries are programmed as written (one rule each, as upstream) and CHECK accepts them.
            (
                r#""traffic.sidecar.istio.io/includeOutboundIPRanges": "10.252.0.0/16,10.252.0.0/16",
                   "traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.9.0.0/16,10.9.0.0/16",
                   "traffic.sidecar.istio.io/excludeInterfaces": "eth9,eth9""#,
                true,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let pod = backend.pod(&node, &format!("pfx{b}{i}"), ann, "", false);
            pod.add().assert_success();
            pod.run("CHECK").assert_success();
            assert_eq!(
                outbound_captured(&node, &pod),
                captured,
                "{record} {backend:?} {ann}"
            );
        }
    }
}
