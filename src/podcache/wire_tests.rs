//! Differential: the same pod object decided from an API GET and from the pod cache, the whole way a hit
//! travels (reduced by the agent, kept in the store, rendered as the hit line, read back by the plugin's
//! decode and checked to be the pod asked for). The reduction alone is compared on every conformance
//! vector (tests/conformance/podcache_reduce.rs); this adds the text round trip (escapes, numbers, keys
//! spelt with escapes) on the values most likely to change in it.

use super::client::is_the_pod_asked_for;
use super::proto::{decode_reply, Reply, Request};
use super::store::{Lookup, Store};
use crate::json::{parse_object, Object};
use crate::redirect::plan::{decide_pod, PodPlan};
use crate::redirect::reduce::reduce;
use crate::redirect::PodInfo;

/// The decision as text; any error is "error" (ADD fails either way: a number past 2^53 fails as "not an
/// integer" from the API server's text and as "not a valid id" once the cache has printed it in full).
fn decision(pod: &Object) -> String {
    match PodInfo::from_pod(pod).and_then(|i| decide_pod(&i)) {
        Ok(PodPlan::Skip(why)) => format!("skip {why}"),
        Ok(PodPlan::Redirect(r)) => format!("redirect {r:?}"),
        Err(_) => "error".into(),
    }
}

/// The pod as the plugin gets it from an agent that was fed `pod`, asked by its UID.
fn through_the_cache(pod: &Object) -> Object {
    let r = reduce(pod);
    let req = Request {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
    };
    let mut s = Store::default();
    s.apply(r);
    s.list_done();
    s.watch_open();
    let name = &req.name;
    let line = match s.lookup(&req, false) {
        Lookup::Hit(l) => l,
        other => panic!("{name}: {other:?}"),
    };
    let Some((b'\n', line)) = line.split_last() else {
        panic!("{name}: a hit line ends with a newline");
    };
    match decode_reply(line) {
        Ok(Reply::Hit(p)) => {
            assert!(is_the_pod_asked_for(&p, &req), "{name}: {p:?}");
            p
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn a_cached_pod_decides_as_the_api_servers_object_after_the_text_round_trip() {
    let sc = r#""runAsUser":1337.0,"runAsGroup":1e3"#;
    let pod = |ann: &str, labels: &str, env: &str, sc: &str| {
        format!(
            r#"{{"kind":"Pod","metadata":{{"namespace":"shop","name":"web-0","uid":"u-1",
                "resourceVersion":"3","labels":{{{labels}}},
                "annotations":{{"sidecar.istio.io\/status":"{{\"a\":\"\u003c\u2028\ud83d\ude00\\\\\"}}"{ann}}}}},
              "spec":{{"containers":[{{"name":"app"}},{{"name":"istio-proxy","args":["proxy","sidecar"],
                "env":[{env}],"securityContext":{{{sc}}}}}]}},
              "status":{{"podIP":"10.0.0.9"}}}}"#
        )
    };
    let ann = |a: &str| pod(a, "", "", sc);
    let env = |e: &str| pod("", "", e, sc);
    let cases = [
        ann(""),
        // An opt-out spelt with escapes, in the label and in the annotation.
        pod("", r#""sidecar.istio.io/inject":"f\u0061lse""#, "", sc),
        ann(r#","sidecar.istio.io\u002finject":"\u0046""#),
        // Capture configuration with escapes, control characters and blanks that must stay as they are.
        ann(r#","traffic.sidecar.istio.io/excludeOutboundIPRanges":"10.0.0.0\/8,\u0031.2.3.4/32""#),
        ann(r#","traffic.sidecar.istio.io/includeInboundPorts":"\t""#),
        ann(r#","traffic.sidecar.istio.io/includeOutboundIPRanges":"""#),
        ann(r#","traffic.sidecar.istio.io/excludeInterfaces":"eth\u0000""#),
        // Env values read by the decision, escaped.
        env(r#"{"name":"DISABLE_ENVOY","value":"\u0074rue"}"#),
        env(
            r#"{"name":"ISTIO_META_DNS_CAPTURE","value":"true"},{"name":"INVALID_DROP","value":"1"}"#,
        ),
        // Numbers that change spelling in the round trip; ones that fail (alike). (An integer past 2^53
        // reads as a float from the API server's text, fails as "not an integer", and reads as an integer
        // once the cache printed it: no id is that large, so it fails there too; the API server's
        // validation keeps ids within int32 anyway.)
        pod("", "", "", r#""runAsUser":-0.0,"runAsGroup":4294967296"#),
        pod("", "", "", r#""runAsUser":1e300"#),
    ];
    let mut seen = std::collections::BTreeMap::new();
    for text in &cases {
        let full = parse_object(text, "pod").unwrap_or_else(|e| panic!("{e}: {text}"));
        let want = decision(&full);
        *seen
            .entry(want.split(' ').next().unwrap_or("").to_string())
            .or_insert(0) += 1;
        let cached = through_the_cache(&full);
        assert_eq!(decision(&cached), want, "{text}");
        assert_eq!(
            PodInfo::from_pod(&cached).ok(),
            PodInfo::from_pod(&full).ok(),
            "{text}"
        );
    }
    // Each outcome is among the cases: 4 redirected, 3 skipped, 4 failing.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            ("error".into(), 4),
            ("redirect".into(), 4),
            ("skip".into(), 3)
        ]
    );
}
