//! The node's pod cache keeps each pod reduced to what the decision reads
//! (`istio_cni::redirect::reduce`). For every pod object among the vectors (`pod/`, `differential/pod/`,
//! and every pod of `repair/cases.json`) the reduced object gives the same `PodInfo`, the same decision and
//! the same rules as the full object, and it is smaller: a cached pod starts exactly as one read from the
//! API server would.

use istio_cni::json::{self, Object, Value};
use istio_cni::redirect::plan::{decide_pod, plan_pod, Addresses, NodeEnv, Planned, PodPlan};
use istio_cni::redirect::reduce::{reduce, reduce_object};
use istio_cni::redirect::PodInfo;
use std::path::Path;

use crate::support::conformance_dir;

fn pod_files(kind: &str) -> Vec<(String, Object)> {
    let base = conformance_dir().join(kind);
    let mut dirs: Vec<_> = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("read {}: {e}", base.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pod.json").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no pods under {}", base.display());
    dirs.iter()
        .map(|d| {
            (
                format!("{kind}/{}", name(d)),
                read_object(&d.join("pod.json")),
            )
        })
        .collect()
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn read_object(p: &Path) -> Object {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    json::parse_object(&text, &p.display().to_string()).unwrap()
}

fn repair_pods() -> Vec<(String, Object)> {
    let p = conformance_dir().join("repair/cases.json");
    let text = std::fs::read_to_string(&p).unwrap();
    let Value::Array(cases) = json::parse(&text, "cases.json").unwrap() else {
        panic!("cases.json is not a list");
    };
    cases
        .iter()
        .filter_map(|c| match c {
            Value::Object(c) => Some((
                format!("repair/{}", json::str_of(c, "name").unwrap_or("?")),
                json::obj_of(c, "pod")?.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// What the plugin would do with the pod, as text: the decision, and the rules for its `status.podIPs`.
fn outcome(info: &istio_cni::Result<PodInfo>) -> String {
    let info = match info {
        Ok(i) => i,
        Err(e) => return format!("error {e}"),
    };
    let decision = match decide_pod(info) {
        Ok(PodPlan::Skip(why)) => format!("skip {why}"),
        Ok(PodPlan::Redirect(r)) => format!("redirect {r:?}"),
        Err(e) => format!("error {e}"),
    };
    let env = NodeEnv::take(&|_| None);
    let rules = match plan_pod(info, Addresses::PodIps(&info.pod_ips), &env) {
        Ok(Planned::Skip(_)) => String::new(),
        Ok(Planned::Rules(docs)) => format!("{docs:?}"),
        Err(e) => format!("error {e}"),
    };
    format!("{decision}\n{rules}")
}

#[test]
fn reduced_pods_decide_and_plan_exactly_as_the_full_objects() {
    let mut all = pod_files("pod");
    all.extend(pod_files("differential/pod"));
    all.extend(repair_pods());
    let (mut redirected, mut full_bytes, mut kept_bytes) = (0, 0, 0);
    for (what, pod) in &all {
        let full = PodInfo::from_pod(pod);
        let small = reduce_object(pod);
        let reduced = PodInfo::from_pod(&small);
        match (&full, &reduced) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{what}: full {full:?}, reduced {reduced:?}"),
        }
        let o = outcome(&full);
        assert_eq!(o, outcome(&reduced), "{what}");
        redirected += usize::from(o.starts_with("redirect"));
        let r = reduce(pod);
        let body = r
            .body
            .unwrap_or_else(|| panic!("{what}: too large to cache"));
        full_bytes += json::to_compact(&Value::Object(pod.clone())).len();
        kept_bytes += body.len();
    }
    assert!(
        redirected >= 10,
        "only {redirected} redirected pods among the vectors"
    );
    println!(
        "{} pods ({redirected} redirected): {full_bytes} bytes of JSON, {kept_bytes} kept by the cache",
        all.len()
    );
    assert!(kept_bytes < full_bytes);
}
