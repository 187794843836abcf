use super::*;
use crate::audit::tests::{conf, pod, RUNNING};
use crate::json::Value;

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

/// `body`'s pod as a write sees it (`None`: one without its reduced pod, named `ns/none`).
fn live(body: Option<&str>) -> Live<'static> {
    let Some(b) = body else {
        return Live {
            key: "ns/none",
            uid: "u-none",
            pod_ip: "10.9.9.9",
            body: None,
        };
    };
    let o = json::parse_object(b, "t").unwrap();
    let v = PodView::of(&o);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    Live {
        key: leak(v.key()),
        uid: leak(v.uid.to_string()),
        pod_ip: leak(v.pod_ip.to_string()),
        body: Some(leak(b.to_string())),
    }
}

/// The file's text for `bodies`, none carried over.
fn enc<'a>(bodies: impl IntoIterator<Item = Option<&'a str>>) -> Encoded {
    encode(bodies.into_iter().map(live), "")
}

/// `body`'s line in the file.
fn line(body: &str) -> String {
    let l = live(Some(body));
    format!("{} {} {} {body}", l.key, l.uid, l.pod_ip)
}

#[test]
fn kept_pods_read_back_as_written_and_decide_as_the_pod_did() {
    let hdr = header();
    let full = pod(
        "",
        RUNNING,
        r#","labels":{"sidecar.istio.io/inject":"true","other":"x"}"#,
    );
    let b = reduced(&full).unwrap();
    assert!(!b.contains("other") && !b.contains("nodeName"), "{b}");
    let (a, z) = (body("a", "u-a", "10.0.0.1"), body("z", "u-z", "10.0.0.2"));
    let enc = enc([Some(a.as_str()), Some(&*b), Some(z.as_str())]);
    assert_eq!((enc.kept, enc.left_out), (3, 0));
    assert!(enc.text.starts_with(&format!("{hdr}\n")));
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
        crate::pod_rules::decide(&p.pod().unwrap(), Some(&conf())),
        crate::pod_rules::decide(&full, Some(&conf()))
    );
    // Written again, byte for byte.
    let again = super::tests::enc(back.values().map(|f| Some(&*f.body)));
    assert_eq!(again.text, enc.text);
    assert_eq!(decode(&format!("{hdr}\n")).unwrap().len(), 0);
}

#[test]
fn a_kept_pod_applies_only_to_its_uid_and_pod_ip() {
    let text = enc([Some(body("p", "u-1", "10.1.2.3").as_str())]).text;
    let f = &decode(&text).unwrap()["ns/p"];
    assert!(applies(f, "u-1", "10.1.2.3"));
    assert!(!applies(f, "u-2", "10.1.2.3"), "recreated under its name");
    assert!(!applies(f, "u-1", "10.1.2.9"), "its sandbox recreated");
    assert!(!applies(f, "", ""));
}

#[test]
fn a_file_not_ours_or_out_of_bounds_is_refused_whole() {
    let hdr = header();
    let good = line(&body("p", "u-1", "10.1.2.3"));
    let refused = |text: &str, why: &str| {
        let e = decode(text).expect_err(text);
        assert!(e.contains(why), "{e} (wanted {why})");
    };
    refused("", "empty");
    refused(&format!("other v2\n{good}\n"), "not a kept-decisions file");
    refused(&format!("{hdr}\n{good}\n{{\"metadata\":"), "line 3");
    refused(&format!("{hdr}\n{good}\n\n"), "line 3");
    refused(&format!("{hdr}\n[1]\n"), "line 2: not <key>");
    refused(&format!("{hdr}\nns/p u-1 10.1.2.3 [1]\n"), "line 2");
    // The head must name the pod it holds.
    let b = body("p", "u-1", "10.1.2.3");
    for head in [
        "ns/q u-1 10.1.2.3",
        "ns/p u-2 10.1.2.3",
        "ns/p u-1 10.1.2.4",
    ] {
        refused(&format!("{hdr}\n{head} {b}\n"), "names");
    }
    refused(&format!("{hdr}\n{good}\n{good}\n"), "ns/p twice");
    let no_ip = body("q", "u-2", "").replace(r#","podIPs":[{"ip":""}]"#, "");
    refused(&format!("{hdr}\nns/q u-2 x {no_ip}\n"), "pod IP");
    let no_uid = body("q", "", "10.0.0.9");
    refused(&format!("{hdr}\nns/q x 10.0.0.9 {no_uid}\n"), "uid");
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_POD_BYTES));
    refused(&format!("{hdr}\nns/q u-2 10.0.0.9 {big}\n"), "bytes");
    refused(&"a".repeat(MAX_BYTES + 1), "bound");
    let many: Vec<String> = (0..=MAX_ENTRIES)
        .map(|i| line(&body(&format!("p{i}"), &format!("u{i}"), "10.0.0.1")))
        .collect();
    refused(
        &format!("{hdr}\n{}\n", many.join("\n")),
        &format!("over {MAX_ENTRIES} pods"),
    );
}

#[test]
fn the_file_keeps_at_most_its_bounds_and_counts_the_rest() {
    let many: Vec<String> = (0..MAX_ENTRIES + 3)
        .map(|i| body(&format!("p{i:05}"), &format!("u{i}"), "10.0.0.1"))
        .collect();
    let enc = super::tests::enc(many.iter().map(|b| Some(b.as_str())));
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
    let enc = super::tests::enc(big.iter().map(|b| Some(b.as_str())));
    assert!(enc.text.len() <= MAX_BYTES);
    assert_eq!(enc.kept + enc.left_out, 200);
    assert!(enc.left_out > 0 && enc.kept > 0, "{enc:?}");
    assert_eq!(decode(&enc.text).unwrap().len(), enc.kept);
    // One too large to keep (no body) is counted, not written.
    let one = super::tests::enc([None, Some(many[0].as_str())]);
    assert_eq!((one.kept, one.left_out), (1, 1));
    let label = format!(
        r#","labels":{{"sidecar.istio.io/inject":"{}"}}"#,
        "a".repeat(MAX_POD_BYTES)
    );
    let huge = pod("", RUNNING, &label);
    assert_eq!(reduced(&huge), None);
}

#[test]
fn a_pod_written_before_is_carried_over_from_the_last_file_for_its_uid_and_pod_ip_only() {
    let hdr = header();
    let (a, p) = (body("a", "u-a", "10.0.0.1"), body("p", "u-1", "10.1.2.3"));
    let first = enc([Some(a.as_str()), Some(p.as_str())]).text;
    // The store let go of both; a new pod comes: the others' lines are carried over as they were.
    let z = body("z", "u-z", "10.0.0.2");
    let held = |b: &str| Live {
        body: None,
        ..live(Some(b))
    };
    let next = encode([held(&a), held(&p), live(Some(&z))], &first);
    assert_eq!((next.kept, next.left_out), (3, 0));
    let back = decode(&next.text).unwrap();
    assert_eq!(*back["ns/a"].body, *a);
    assert_eq!(*back["ns/p"].body, *p);
    // Lines out of key order (not ours to write) are passed over, not searched for; a line not ours too.
    let swapped: Vec<&str> = first.lines().collect();
    let swapped = format!("{hdr}\nbad line\n{}\n{}\n", swapped[2], swapped[1]);
    let e = encode([held(&a), held(&p)], &swapped);
    assert_eq!((e.kept, e.left_out), (1, 1), "{swapped}");
    assert_eq!(
        decode(&e.text).unwrap().keys().collect::<Vec<_>>(),
        ["ns/p"]
    );
    // Another UID or pod IP under the key, no last file, or one not ours: not carried over, counted.
    let recreated = Live {
        uid: "u-2",
        ..held(&p)
    };
    let moved = Live {
        pod_ip: "10.1.2.9",
        ..held(&p)
    };
    // A head that would not read back (an empty UID) is left out, not written to spoil the file.
    let no_uid = Live {
        uid: "",
        ..live(Some(&p))
    };
    let spaced = Live {
        pod_ip: "10.1.2.3 x",
        ..live(Some(&p))
    };
    for l in [no_uid, spaced] {
        let e = encode([l, live(Some(&a))], "");
        assert_eq!((e.kept, e.left_out), (1, 1), "{l:?}");
        assert_eq!(decode(&e.text).unwrap().len(), 1);
    }
    for (l, old) in [
        (recreated, first.as_str()),
        (moved, first.as_str()),
        (held(&p), ""),
        (held(&p), "garbage\nns/p u-1 10.1.2.3 {}\n"),
    ] {
        let e = encode([l], old);
        assert_eq!((e.kept, e.left_out), (0, 1), "{l:?} from {old:?}");
    }
}

#[test]
fn a_file_another_build_reduced_is_refused_and_never_carried_over() {
    // The first line names this build's reduction; a file with another (or, as v1 wrote it, none) is not
    // decided from: a key this build reads and that build dropped would read as absent.
    let hdr = header();
    assert!(hdr.starts_with(&format!("{FORMAT} reduced ")));
    let p = body("p", "u-1", "10.1.2.3");
    let good = line(&p);
    assert_eq!(decode(&format!("{hdr}\n{good}\n")).unwrap().len(), 1);
    let held = Live {
        body: None,
        ..live(Some(&p))
    };
    // Carried over from a file this build wrote.
    let ours = encode([held], &format!("{hdr}\n{good}\n"));
    assert_eq!((ours.kept, ours.left_out), (1, 0));
    for other in [
        FORMAT.to_string(),
        format!("{FORMAT} reduced 0000000000000000"),
    ] {
        let text = format!("{other}\n{good}\n");
        let e = decode(&text).unwrap_err();
        assert!(
            e.contains("reduces pods otherwise") || e.contains("not a kept-decisions file"),
            "{e}"
        );
        // Nor is its line carried over by the next write.
        let held = Live {
            body: None,
            ..live(Some(&p))
        };
        let next = encode([held], &text);
        assert_eq!((next.kept, next.left_out), (0, 1), "{}", next.text);
        assert_eq!(next.text, format!("{hdr}\n"));
    }
}
