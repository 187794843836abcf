use super::*;

fn obj(text: &str) -> Object {
    json::parse_object(text, "test").unwrap()
}

fn node(labels: &str, taints: &str) -> Object {
    obj(&format!(
        r#"{{"metadata":{{"name":"node-1","labels":{labels}}},"spec":{{"taints":{taints}}}}}"#
    ))
}

fn template(spec: &str) -> Object {
    obj(&format!(r#"{{"metadata":{{}},"spec":{spec}}}"#))
}

fn linux() -> Object {
    node(
        r#"{"kubernetes.io/os":"linux","zone":"a","cores":"8"}"#,
        "[]",
    )
}

fn runs(spec: &str, n: &Object) -> bool {
    match daemon_pod_fits(&template(spec), Some(n)) {
        Fit::Runs => true,
        Fit::DoesNotRun(_) => false,
        Fit::NeedsNode => panic!("node was given"),
    }
}

/// The tolerations both upstream's chart and our manifests give the DaemonSet.
const CHART_TOLERATIONS: &str = r#"[{"effect":"NoSchedule","operator":"Exists"},
    {"key":"CriticalAddonsOnly","operator":"Exists"},{"effect":"NoExecute","operator":"Exists"}]"#;

#[test]
fn node_selector_labels_must_all_match() {
    let n = linux();
    assert!(runs(r#"{"nodeSelector":{"kubernetes.io/os":"linux"}}"#, &n));
    assert!(runs(
        r#"{"nodeSelector":{"kubernetes.io/os":"linux","zone":"a"}}"#,
        &n
    ));
    assert!(!runs(
        r#"{"nodeSelector":{"kubernetes.io/os":"linux","zone":"b"}}"#,
        &n
    ));
    let Fit::DoesNotRun(why) =
        daemon_pod_fits(&template(r#"{"nodeSelector":{"gpu":"true"}}"#), Some(&n))
    else {
        panic!()
    };
    assert!(why.contains("gpu=true") && why.contains("absent"), "{why}");
    assert!(runs(r#"{"nodeSelector":{}}"#, &n));
}

fn affinity(terms: &str) -> String {
    format!(
        r#"{{"affinity":{{"nodeAffinity":{{"requiredDuringSchedulingIgnoredDuringExecution":{{"nodeSelectorTerms":{terms}}}}}}}}}"#
    )
}

#[test]
fn every_operator_on_labels() {
    let n = linux();
    let on = |key: &str, op: &str, values: &str| {
        runs(
            &affinity(&format!(
                r#"[{{"matchExpressions":[{{"key":"{key}","operator":"{op}","values":{values}}}]}}]"#
            )),
            &n,
        )
    };
    let one = |op: &str, values: &str| on("zone", op, values);
    assert!(one("In", r#"["a","b"]"#));
    assert!(!one("In", r#"["b"]"#));
    assert!(one("NotIn", r#"["b"]"#));
    assert!(!one("NotIn", r#"["a"]"#));
    assert!(one("Exists", "[]"));
    assert!(!one("DoesNotExist", "[]"));
    assert!(
        !one("Bogus", r#"["a"]"#),
        "an unknown operator matches nothing"
    );
    // A label the node lacks: NotIn and DoesNotExist hold, In and Exists do not.
    assert!(on("gpu", "NotIn", r#"["x"]"#));
    assert!(on("gpu", "DoesNotExist", "[]"));
    assert!(!on("gpu", "In", r#"["x"]"#));
    assert!(!on("gpu", "Exists", "[]"));
    // Gt / Lt compare integers; one value only; a missing or non-numeric label fails.
    assert!(on("cores", "Gt", r#"["4"]"#));
    assert!(!on("cores", "Gt", r#"["8"]"#));
    assert!(on("cores", "Lt", r#"["16"]"#));
    assert!(!on("cores", "Lt", r#"["8"]"#));
    assert!(!on("cores", "Gt", r#"["4","5"]"#));
    assert!(!on("cores", "Gt", r#"["four"]"#));
    assert!(!on("zone", "Gt", r#"["1"]"#));
    assert!(!on("gpu", "Lt", r#"["1"]"#));
}

#[test]
fn terms_are_ored_and_requirements_anded() {
    let n = linux();
    let t_ok = r#"{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]},
        {"key":"kubernetes.io/os","operator":"In","values":["linux"]}]}"#;
    let t_bad = r#"{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]},
        {"key":"kubernetes.io/os","operator":"In","values":["windows"]}]}"#;
    assert!(runs(&affinity(&format!("[{t_ok}]")), &n));
    assert!(
        !runs(&affinity(&format!("[{t_bad}]")), &n),
        "AND within a term"
    );
    assert!(
        runs(&affinity(&format!("[{t_bad},{t_ok}]")), &n),
        "OR across terms"
    );
    assert!(!runs(&affinity("[]"), &n), "no term matches nothing");
    assert!(
        !runs(&affinity("[{}]"), &n),
        "an empty term matches nothing"
    );
    // The node selector and the affinity must both hold.
    let both = affinity(&format!("[{t_ok}]")).replacen('{', r#"{"nodeSelector":{"zone":"b"},"#, 1);
    assert!(!runs(&both, &n));
}

#[test]
fn match_fields_name_the_node() {
    let n = linux();
    let f = |op: &str, key: &str, v: &str| {
        runs(
            &affinity(&format!(
                r#"[{{"matchFields":[{{"key":"{key}","operator":"{op}","values":["{v}"]}}]}}]"#
            )),
            &n,
        )
    };
    assert!(f("In", "metadata.name", "node-1"));
    assert!(!f("In", "metadata.name", "node-2"));
    assert!(f("NotIn", "metadata.name", "node-2"));
    assert!(!f("NotIn", "metadata.name", "node-1"));
    assert!(!f("In", "spec.podCIDR", "node-1"), "only metadata.name");
    // Fields and expressions in one term are ANDed.
    let mixed = affinity(
        r#"[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}],
             "matchFields":[{"key":"metadata.name","operator":"In","values":["node-2"]}]}]"#,
    );
    assert!(!runs(&mixed, &n));
}

#[test]
fn taints_need_tolerations_the_controller_adds_some() {
    let tainted = |t: &str| {
        node(
            r#"{"kubernetes.io/os":"linux"}"#,
            &format!(r#"[{{"key":"{t}","value":"x","effect":"NoSchedule"}}]"#),
        )
    };
    let dedicated = tainted("dedicated");
    assert!(!runs("{}", &dedicated));
    assert!(runs(
        r#"{"tolerations":[{"key":"dedicated","operator":"Equal","value":"x"}]}"#,
        &dedicated
    ));
    assert!(!runs(
        r#"{"tolerations":[{"key":"dedicated","operator":"Equal","value":"y"}]}"#,
        &dedicated
    ));
    assert!(!runs(
        r#"{"tolerations":[{"key":"dedicated","operator":"Exists","effect":"NoExecute"}]}"#,
        &dedicated
    ));
    assert!(runs(
        &format!(r#"{{"tolerations":{CHART_TOLERATIONS}}}"#),
        &dedicated
    ));
    // What the DaemonSet controller tolerates for every daemon pod.
    assert!(runs("{}", &tainted("node.kubernetes.io/unschedulable")));
    assert!(runs("{}", &tainted("node.kubernetes.io/disk-pressure")));
    assert!(!runs(
        "{}",
        &tainted("node.kubernetes.io/network-unavailable")
    ));
    assert!(runs(
        r#"{"hostNetwork":true}"#,
        &tainted("node.kubernetes.io/network-unavailable")
    ));
    // PreferNoSchedule does not keep a daemon pod away.
    let soft = node(
        "{}",
        r#"[{"key":"k","value":"v","effect":"PreferNoSchedule"}]"#,
    );
    assert!(runs("{}", &soft));
    let no_exec = node("{}", r#"[{"key":"k","effect":"NoExecute"}]"#);
    assert!(!runs("{}", &no_exec));
    assert!(runs(
        r#"{"tolerations":[{"key":"k","operator":"Exists"}]}"#,
        &no_exec
    ));
}

#[test]
fn a_pinned_template_runs_only_on_its_node() {
    assert!(runs(r#"{"nodeName":"node-1"}"#, &linux()));
    assert!(!runs(r#"{"nodeName":"node-2"}"#, &linux()));
}

#[test]
fn without_the_node_only_a_template_that_asks_nothing_is_known() {
    let t = |spec: &str| daemon_pod_fits(&template(spec), None);
    assert_eq!(
        t(&format!(r#"{{"tolerations":{CHART_TOLERATIONS}}}"#)),
        Fit::Runs
    );
    assert_eq!(
        t(r#"{"tolerations":[{"operator":"Exists"}]}"#),
        Fit::Runs,
        "one toleration of everything"
    );
    assert_eq!(t("{}"), Fit::NeedsNode, "a taint might not be tolerated");
    assert_eq!(
        t(&format!(
            r#"{{"nodeSelector":{{"kubernetes.io/os":"linux"}},"tolerations":{CHART_TOLERATIONS}}}"#
        )),
        Fit::NeedsNode
    );
    assert_eq!(
        t(&affinity(
            r#"[{"matchExpressions":[{"key":"a","operator":"Exists"}]}]"#
        )),
        Fit::NeedsNode
    );
    assert_eq!(daemon_pod_fits(&Object::new(), None), Fit::NeedsNode);
}

/// Upstream's rendered chart: its DaemonSet's template runs on a Linux node, whatever its taints.
#[test]
fn upstream_charts_template_runs_on_a_linux_node() {
    let spec = format!(
        r#"{{"nodeSelector":{{"kubernetes.io/os":"linux"}},"tolerations":{CHART_TOLERATIONS}}}"#
    );
    let n = node(
        r#"{"kubernetes.io/os":"linux"}"#,
        r#"[{"key":"cni.istio.io/not-ready","effect":"NoSchedule"},{"key":"x","effect":"NoExecute"}]"#,
    );
    assert!(runs(&spec, &n));
    assert!(!runs(
        &spec,
        &node(r#"{"kubernetes.io/os":"windows"}"#, "[]")
    ));
}
