use super::*;
use crate::audit::tests::{conf, pod, RUNNING};

fn body(name: &str, uid: &str, ip: &str) -> String {
    let p = pod("", RUNNING, "");
    let text = json::to_compact(&Value::Object(p))
        .replace(r#""name":"p""#, &format!(r#""name":"{name}""#))
        .replace("u-1", uid)
        .replace("10.1.2.3", ip);
    reduced(&json::parse_object(&text, "pod").unwrap())
        .unwrap()
        .to_string()
}

#[test]
fn kept_pods_read_back_as_written_and_decide_as_the_pod_did() {
    let full = pod(
        "",
        RUNNING,
        r#","labels":{"sidecar.istio.io/inject":"true","other":"x"}"#,
    );
    let b = reduced(&full).unwrap();
    assert!(!b.contains("other") && !b.contains("nodeName"), "{b}");
    let (a, z) = (body("a", "u-a", "10.0.0.1"), body("z", "u-z", "10.0.0.2"));
    let enc = encode([Some(a.as_str()), Some(&*b), Some(z.as_str())]);
    assert_eq!((enc.kept, enc.left_out), (3, 0));
    assert!(enc.text.starts_with(&format!("{HEADER}\n")));
    assert_eq!(enc.text.lines().count(), 4);
    let back = decode(&enc.text).unwrap();
    assert_eq!(
        back.keys().collect::<Vec<_>>(),
        ["ns/a", "ns/p", "ns/z"],
        "by namespace/name"
    );
    let p = &back["ns/p"];
    assert_eq!((p.uid.as_str(), p.pod_ip.as_str()), ("u-1", "10.1.2.3"));
    assert_eq!(*p.body, *b, "written again as it is");
    // The same decision as the full pod's, from the same function.
    assert_eq!(
        crate::pod_rules::decide(&p.pod, Some(&conf())),
        crate::pod_rules::decide(&full, Some(&conf()))
    );
    // Written again, byte for byte.
    let again = encode(back.values().map(|f| Some(&*f.body)));
    assert_eq!(again.text, enc.text);
    assert_eq!(decode(&format!("{HEADER}\n")).unwrap().len(), 0);
}

#[test]
fn a_kept_pod_applies_only_to_its_uid_and_pod_ip() {
    let text = encode([Some(body("p", "u-1", "10.1.2.3").as_str())]).text;
    let f = &decode(&text).unwrap()["ns/p"];
    assert!(applies(f, "u-1", "10.1.2.3"));
    assert!(!applies(f, "u-2", "10.1.2.3"), "recreated under its name");
    assert!(!applies(f, "u-1", "10.1.2.9"), "its sandbox recreated");
    assert!(!applies(f, "", ""));
}

#[test]
fn a_file_not_ours_or_out_of_bounds_is_refused_whole() {
    let good = body("p", "u-1", "10.1.2.3");
    let refused = |text: &str, why: &str| {
        let e = decode(text).expect_err(text);
        assert!(e.contains(why), "{e} (wanted {why})");
    };
    refused("", "empty");
    refused(&format!("other v2\n{good}\n"), "not a kept-decisions file");
    refused(&format!("{HEADER}\n{good}\n{{\"metadata\":"), "line 3");
    refused(&format!("{HEADER}\n{good}\n\n"), "line 3");
    refused(&format!("{HEADER}\n[1]\n"), "line 2");
    refused(&format!("{HEADER}\n{good}\n{good}\n"), "ns/p twice");
    let no_ip = body("q", "u-2", "").replace(r#","podIPs":[{"ip":""}]"#, "");
    refused(&format!("{HEADER}\n{no_ip}\n"), "pod IP");
    let no_uid = body("q", "", "10.0.0.9");
    refused(&format!("{HEADER}\n{no_uid}\n"), "uid");
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_POD_BYTES));
    refused(&format!("{HEADER}\n{big}\n"), "bytes");
    refused(&"a".repeat(MAX_BYTES + 1), "bound");
    let many: Vec<String> = (0..=MAX_ENTRIES)
        .map(|i| body(&format!("p{i}"), &format!("u{i}"), "10.0.0.1"))
        .collect();
    refused(
        &format!("{HEADER}\n{}\n", many.join("\n")),
        &format!("over {MAX_ENTRIES} pods"),
    );
}

#[test]
fn the_file_keeps_at_most_its_bounds_and_counts_the_rest() {
    let many: Vec<String> = (0..MAX_ENTRIES + 3)
        .map(|i| body(&format!("p{i:05}"), &format!("u{i}"), "10.0.0.1"))
        .collect();
    let enc = encode(many.iter().map(|b| Some(b.as_str())));
    assert_eq!((enc.kept, enc.left_out), (MAX_ENTRIES, 3));
    assert_eq!(decode(&enc.text).unwrap().len(), MAX_ENTRIES);
    // Bytes: pods of 30 KiB each, far fewer than MAX_ENTRIES fit.
    let pad = "x".repeat(30 * 1024);
    let big: Vec<String> = (0..200)
        .map(|i| {
            body(&format!("b{i:03}"), &format!("u{i}"), "10.0.0.1")
                .replace(r#""name":"b"#, &format!(r#""name":"{pad}b"#))
        })
        .collect();
    assert!(big[0].len() <= MAX_POD_BYTES);
    let enc = encode(big.iter().map(|b| Some(b.as_str())));
    assert!(enc.text.len() <= MAX_BYTES);
    assert_eq!(enc.kept + enc.left_out, 200);
    assert!(enc.left_out > 0 && enc.kept > 0, "{enc:?}");
    assert_eq!(decode(&enc.text).unwrap().len(), enc.kept);
    // One too large to keep (no body) is counted, not written.
    let one = encode([None, Some(many[0].as_str())]);
    assert_eq!((one.kept, one.left_out), (1, 1));
    let label = format!(
        r#","labels":{{"sidecar.istio.io/inject":"{}"}}"#,
        "a".repeat(MAX_POD_BYTES)
    );
    let huge = pod("", RUNNING, &label);
    assert_eq!(reduced(&huge), None);
}
