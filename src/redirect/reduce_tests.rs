use super::*;
use crate::json::parse_object;
use crate::redirect::plan::{decide_pod, PodPlan};
use crate::redirect::PodInfo;

/// An injected pod as the API server sends it: everything the injector adds, most of it never read.
fn injected(extra_ann: &str, proxy_env: &str) -> Object {
    parse_object(
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod",
            "metadata":{{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42",
              "generateName":"web-","labels":{{"app":"web","sidecar.istio.io/inject":"true"}},
              "annotations":{{"sidecar.istio.io/status":"{{\"containers\":[\"istio-proxy\"]}}",
                "kubectl.kubernetes.io/default-container":"web","prometheus.io/port":"15020"{extra_ann}}},
              "ownerReferences":[{{"kind":"ReplicaSet","name":"web-5d8"}}],
              "managedFields":[{{"manager":"kube-controller-manager","fieldsV1":{{"f:metadata":{{}}}}}}]}},
            "spec":{{"nodeName":"n1","volumes":[{{"name":"istio-envoy","emptyDir":{{}}}}],
              "initContainers":[{{"name":"istio-validation","image":"proxyv2","args":["istio-iptables","-p","15001"]}}],
              "containers":[{{"name":"web","image":"nginx","ports":[{{"containerPort":80}}],
                              "env":[{{"name":"DISABLE_ENVOY","value":"true"}}]}},
                {{"name":"istio-proxy","image":"proxyv2","args":["proxy","sidecar","--domain","x"],
                  "env":[{{"name":"ISTIO_META_POD_PORTS","value":"[{{\"containerPort\":80}}]"}},
                         {{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"fieldPath":"metadata.name"}}}}}}{proxy_env}],
                  "securityContext":{{"runAsUser":1337,"runAsGroup":1337,"runAsNonRoot":true}},
                  "resources":{{"limits":{{"cpu":"2"}}}}}}]}},
            "status":{{"phase":"Pending","podIP":"10.0.0.9","podIPs":[{{"ip":"10.0.0.9"}},{{"ip":"fd00::9"}}],
              "conditions":[{{"type":"PodScheduled","status":"True"}}]}}}}"#
        ),
        "pod",
    )
    .unwrap()
}

fn info(o: &Object) -> crate::Result<PodInfo> {
    PodInfo::from_pod(o)
}

fn body_of(r: &Reduced) -> Object {
    parse_object(r.body.as_deref().unwrap(), "reduced").unwrap()
}

#[test]
fn keeps_exactly_what_the_decision_reads() {
    let pod = injected(
        r#","traffic.sidecar.istio.io/excludeOutboundPorts":"9000""#,
        r#",{"name":"ISTIO_DUAL_STACK","value":"true"}"#,
    );
    let r = reduce(&pod);
    assert_eq!(
        (
            r.namespace.as_str(),
            r.name.as_str(),
            r.uid.as_str(),
            r.resource_version.as_str(),
            r.terminal
        ),
        ("shop", "web-1", "u-1", "42", false)
    );
    let reduced = body_of(&r);
    assert_eq!(info(&reduced).unwrap(), info(&pod).unwrap());
    let text = r.body.as_deref().unwrap();
    for gone in [
        "managedFields",
        "prometheus.io",
        "ISTIO_META_POD_PORTS",
        "POD_NAME",
        "--domain",
        "nginx",
        "runAsNonRoot",
        "conditions",
        "\"app\"",
        "volumes",
        "ownerReferences",
    ] {
        assert!(!text.contains(gone), "{gone} kept: {text}");
    }
    // The app container's env is never read (only istio-proxy's is).
    assert!(
        !text.contains("\"value\":\"true\"}],\"name\":\"web\""),
        "{text}"
    );
    assert!(text.len() < 700, "{} bytes: {text}", text.len());
}

#[test]
fn same_decision_and_same_errors_as_the_full_object() {
    let cases = [
        injected("", ""),
        injected(r#","sidecar.istio.io/inject":"false""#, ""),
        injected(
            r#","sidecar.istio.io/interceptionMode":"TPROXY""#,
            r#",{"name":"DISABLE_ENVOY","value":"1"}"#,
        ),
        injected(r#","traffic.sidecar.istio.io/excludeInboundPorts":"*""#, ""),
        injected(r#","traffic.sidecar.istio.io/excludeInboundPorts":"x""#, ""),
        injected("", r#",{"name":"INVALID_DROP","value":7}"#),
        injected("", r#",{"value":"no name"}"#),
        injected("", r#",3"#),
        parse_object(r#"{"metadata":{"annotations":[]}}"#, "t").unwrap(),
        parse_object(r#"{"metadata":{"labels":null},"spec":{"containers":[{}]}}"#, "t").unwrap(),
        parse_object(
            r#"{"spec":{"containers":[{"name":"istio-proxy","args":["proxy",5],"securityContext":"x"}]}}"#,
            "t",
        )
        .unwrap(),
        parse_object(r#"{"spec":{"initContainers":{}},"status":{"podIPs":[{"ip":"x"}]}}"#, "t")
            .unwrap(),
        parse_object(r#"{"status":7}"#, "t").unwrap(),
        parse_object("{}", "t").unwrap(),
    ];
    for pod in &cases {
        let reduced = body_of(&reduce(pod));
        let (full, small) = (info(pod), info(&reduced));
        match (&full, &small) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b);
                let plan = |i: &PodInfo| match decide_pod(i) {
                    Ok(PodPlan::Skip(why)) => format!("skip {why}"),
                    Ok(PodPlan::Redirect(r)) => format!("redirect {r:?}"),
                    Err(e) => format!("error {e}"),
                };
                assert_eq!(plan(a), plan(b));
            }
            (Err(_), Err(_)) => {}
            _ => panic!("full {full:?} vs reduced {small:?} for {pod:?}"),
        }
    }
}

#[test]
fn a_huge_annotation_is_too_large_and_an_unread_one_costs_nothing() {
    let big = "x".repeat(1 << 20);
    let r = reduce(&injected(
        &format!(r#","traffic.sidecar.istio.io/excludeOutboundIPRanges":"{big}""#),
        "",
    ));
    assert_eq!(r.body, None);
    assert_eq!((r.name.as_str(), r.uid.as_str()), ("web-1", "u-1"));
    let r = reduce(&injected(&format!(r#","some.vendor/blob":"{big}""#), ""));
    assert!(r.body.as_deref().unwrap().len() < 700);
    // Just over the bound.
    let fill = "y".repeat(MAX_POD_BYTES);
    assert_eq!(
        reduce(&injected(
            &format!(r#","sidecar.istio.io/status":"{fill}""#),
            ""
        ))
        .body,
        None
    );
}

#[test]
fn terminal_phases() {
    for (phase, terminal) in [
        ("Succeeded", true),
        ("Failed", true),
        ("Running", false),
        ("Pending", false),
        ("", false),
    ] {
        let pod = parse_object(
            &format!(r#"{{"metadata":{{"name":"p"}},"status":{{"phase":"{phase}"}}}}"#),
            "t",
        )
        .unwrap();
        assert_eq!(reduce(&pod).terminal, terminal, "{phase}");
    }
}

/// A tripwire for `SHAPE`: what an injected pod reduces to, and the reduction's id, pinned. A change to
/// either is a change of what the pod cache's agent hands the plugin: bump `SHAPE` (the key lists change
/// the id by themselves) and update both pins, so a plugin never decides a pod another build reduced
/// (`podcache::proto::decode_reply` refuses a hit under another id).
#[test]
fn the_reduction_and_its_id_are_pinned() {
    let pod = injected(
        r#","traffic.sidecar.istio.io/excludeOutboundPorts":"9000","kubernetes.io/config.mirror":"k-1""#,
        r#",{"name":"ISTIO_DUAL_STACK","value":"true"}"#,
    );
    let pinned = concat!(
        r#"{"metadata":{"annotations":{"kubernetes.io/config.mirror":"k-1","#,
        r#""sidecar.istio.io/status":"{\"containers\":[\"istio-proxy\"]}","#,
        r#""traffic.sidecar.istio.io/excludeOutboundPorts":"9000"},"#,
        r#""labels":{"sidecar.istio.io/inject":"true"},"name":"web-1","namespace":"shop","uid":"u-1"},"#,
        r#""spec":{"containers":[{"name":"web"},{"args":["proxy","sidecar"],"#,
        r#""env":[{"name":"ISTIO_DUAL_STACK","value":"true"}],"name":"istio-proxy","#,
        r#""securityContext":{"runAsGroup":1337,"runAsUser":1337}}],"#,
        r#""initContainers":[{"name":"istio-validation"}]},"#,
        r#""status":{"podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.9"},{"ip":"fd00::9"}]}}"#
    );
    assert_eq!(reduce(&pod).body.as_deref(), Some(pinned));
    assert_eq!(reduction_id(), "9e0aaafeae258f8c");
}
