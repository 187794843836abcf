//! What the conf dir's real listing reads (effects: a temp directory with sparse, oversized and odd files).

use super::*;

#[test]
fn candidates_of_a_directory() {
    use std::io::Write;
    let d = crate::fsutil::test_dir("select-candidates");
    std::fs::write(d.join("10-a.conflist"), b"{}").unwrap();
    std::fs::write(d.join("notes.txt"), b"{}").unwrap();
    std::fs::create_dir(d.join("20-dir.conf")).unwrap();
    let big = |name: &str, head: &[u8]| {
        let mut f = std::fs::File::create(d.join(name)).unwrap();
        f.write_all(head).unwrap();
        f.set_len(fsutil::MAX_CONFIG_BYTES + 1).unwrap();
    };
    big("05-object.conflist", b" \n{\"name\":");
    big("06-zeros.conflist", b"");
    let mut blank_then_text = vec![b' '; 2000];
    blank_then_text.push(b'x');
    big("07-text.conf", &blank_then_text);
    let mut got: Vec<(String, String)> = list_candidates(&d)
        .unwrap()
        .into_iter()
        .map(|c| {
            let what = match c.content {
                Ok(b) => format!("read {}", String::from_utf8_lossy(&b)),
                Err(Unread::Undecided(_)) => "undecided".into(),
                Err(Unread::Skip(_)) => "skipped".into(),
            };
            (shown(&c.name).into_owned(), what)
        })
        .collect();
    got.sort();
    let want = [
        ("05-object.conflist", "undecided"),
        ("06-zeros.conflist", "skipped"),
        ("07-text.conf", "skipped"),
        ("10-a.conflist", "read {}"),
    ];
    assert_eq!(
        got,
        want.map(|(n, w)| (n.to_string(), w.to_string())).to_vec()
    );
    // A missing directory lists as empty, as libcni; one we cannot list is an error.
    assert!(list_candidates(&d.join("missing")).unwrap().is_empty());
    assert!(list_candidates(&d.join("10-a.conflist")).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}
