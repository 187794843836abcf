//! Foreign entries, operations and malformed input, on tables built in the test.

use super::blob::{self, Entry, Link};
use super::golden_tests::{foreign, replace, rules, FIXTURES};
use super::{entry, ops};
use crate::netfilter::Family::V4;
use crate::xtables::rule::{Match, Op, PortDir, Rule, Target, TCP};

/// An entry no decoder models: `-m comment --comment x -j <verdict>` (comment rev 0, 256-byte payload).
fn comment_entry(verdict: i32) -> Vec<u8> {
    let l = entry::V4;
    let mut e = entry::encode(
        &l,
        &Rule {
            target: Target::Accept,
            ..Rule::any()
        },
    )
    .unwrap();
    e.truncate(l.size);
    let mut text = vec![0u8; 256];
    text[0] = b'x';
    e.extend(super::exts::ext("comment", 0, &text));
    let toff = e.len() as u16;
    e.extend(super::exts::standard(verdict));
    let next = e.len() as u16;
    e[88..90].copy_from_slice(&toff.to_ne_bytes());
    e[90..92].copy_from_slice(&next.to_ne_bytes());
    e
}

#[test]
fn a_foreign_entry_survives_a_rebuild_with_its_jump_moved() {
    // A table as another tool left it: OUTPUT has a comment rule jumping to MINE, and one accepting.
    let mut t = blob::empty(V4, "nat").unwrap();
    ops::apply(&mut t, &[Op::NewChain("MINE".into())]).unwrap();
    let out = t.chains.iter_mut().find(|c| c.name == "OUTPUT").unwrap();
    for (raw, link) in [
        (comment_entry(0), Link::Chain("MINE".into())),
        (comment_entry(-2), Link::Fixed),
    ] {
        out.entries.push(Entry {
            rule: Rule::any(),
            raw: Some((raw, link)),
            old: None,
        });
    }
    let b = blob::build(&t).unwrap();
    let read = super::parse::parse(
        V4,
        "nat",
        b.valid_hooks,
        &b.hook_entry,
        &b.underflow,
        &b.entries,
    )
    .unwrap();
    let kept = foreign(&read);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].raw.as_ref().unwrap().1, Link::Chain("MINE".into()));
    assert!(kept[0]
        .rule
        .matches
        .contains(&Match::Other("-m comment (revision 0)".into())));
    assert_eq!(kept[0].rule.target, Target::Jump("MINE".into()));
    assert_eq!(kept[1].rule.target, Target::Accept);
    // Our document adds a chain sorted before MINE and a rule in PREROUTING: MINE moves.
    let mut next = read.clone();
    let rule = Rule {
        proto: Some(TCP),
        target: Target::Redirect { port: 15001 },
        ..Rule::any()
    };
    ops::apply(
        &mut next,
        &[
            Op::NewChain("AAA".into()),
            Op::Append("AAA".into(), rule.clone()),
            Op::Append(
                "PREROUTING".into(),
                Rule {
                    target: Target::Jump("AAA".into()),
                    ..rule.clone()
                },
            ),
        ],
    )
    .unwrap();
    let b2 = blob::build(&next).unwrap();
    let after = super::parse::parse(
        V4,
        "nat",
        b2.valid_hooks,
        &b2.hook_entry,
        &b2.underflow,
        &b2.entries,
    )
    .unwrap();
    let moved = foreign(&after);
    assert_eq!(moved.len(), 2);
    let (before_raw, after_raw) = (
        &kept[0].raw.as_ref().unwrap().0,
        &moved[0].raw.as_ref().unwrap().0,
    );
    let vat = before_raw.len() - 8;
    assert_ne!(
        before_raw[vat..vat + 4],
        after_raw[vat..vat + 4],
        "the jump moved with MINE"
    );
    assert_eq!(
        before_raw[..vat],
        after_raw[..vat],
        "everything else byte for byte"
    );
    assert_eq!(moved[0].rule.target, Target::Jump("MINE".into()));
    assert_eq!(kept[1].raw, moved[1].raw);
    // The jump lands on MINE's first entry: the entry after the ERROR head naming it.
    let to = i32::from_ne_bytes(after_raw[vat..vat + 4].try_into().unwrap()) as usize;
    let head = to - 176;
    assert_eq!(&b2.entries[head + 112 + 2..head + 112 + 7], b"ERROR");
    assert_eq!(&b2.entries[head + 144..head + 148], b"MINE");
    // A foreign rule is never deleted as one of ours, even when it looks alike.
    let err = ops::apply(
        &mut after.clone(),
        &[Op::Delete("OUTPUT".into(), kept[1].rule.clone())],
    );
    assert!(err.is_err());
}

#[test]
fn operations_fail_as_the_tool_does() {
    let base = {
        let mut t = blob::empty(V4, "nat").unwrap();
        let r = Rule {
            target: Target::Jump("C".into()),
            ..Rule::any()
        };
        ops::apply(
            &mut t,
            &[Op::NewChain("C".into()), Op::Append("OUTPUT".into(), r)],
        )
        .unwrap();
        t
    };
    let fails = |ops: &[Op]| {
        let mut t = base.clone();
        ops::apply(&mut t, ops).unwrap_err().to_string()
    };
    assert!(fails(&[Op::NewChain("C".into())]).contains("chain C already exists"));
    assert!(fails(&[Op::NewChain("OUTPUT".into())]).contains("already exists"));
    assert!(fails(&[Op::DeleteChain("C".into())]).contains("a rule jumps to it"));
    assert!(fails(&[Op::DeleteChain("OUTPUT".into())]).contains("built-in"));
    assert!(fails(&[Op::Flush("NOPE".into())]).contains("NOPE does not exist"));
    assert!(fails(&[Op::Delete("OUTPUT".into(), Rule::any())]).contains("no such rule"));
    assert!(fails(&[Op::Insert("OUTPUT".into(), 3, Rule::any())]).contains("cannot insert at 3"));
    assert!(fails(&[Op::Insert("OUTPUT".into(), 0, Rule::any())]).contains("cannot insert at 0"));
    // A jump to a chain that is not there fails at build, before anything is written.
    let mut t = base.clone();
    ops::apply(
        &mut t,
        &[Op::Append(
            "OUTPUT".into(),
            Rule {
                target: Target::Jump("X".into()),
                ..Rule::any()
            },
        )],
    )
    .unwrap();
    assert!(blob::build(&t)
        .unwrap_err()
        .to_string()
        .contains("chain X, which does not exist"));
    // Insert, delete, flush, delete chain: the converge forms.
    let mut t = base.clone();
    let ret = |p| Rule {
        proto: Some(TCP),
        matches: vec![Match::Port {
            dir: PortDir::Dst,
            port: p,
            inv: false,
        }],
        target: Target::Return,
        ..Rule::any()
    };
    ops::apply(
        &mut t,
        &[
            Op::Append("C".into(), ret(1)),
            Op::Insert("C".into(), 1, ret(2)),
            Op::Insert("C".into(), 3, ret(3)),
            Op::Delete("C".into(), ret(1)),
        ],
    )
    .unwrap();
    assert_eq!(rules(&t, "C"), vec![&ret(2), &ret(3)]);
    ops::apply(
        &mut t,
        &[
            Op::Delete(
                "OUTPUT".into(),
                Rule {
                    target: Target::Jump("C".into()),
                    ..Rule::any()
                },
            ),
            Op::Flush("C".into()),
            Op::DeleteChain("C".into()),
        ],
    )
    .unwrap();
    assert_eq!(
        blob::build(&t).unwrap().entries,
        blob::build(&blob::empty(V4, "nat").unwrap())
            .unwrap()
            .entries
    );
}

#[test]
fn malformed_blobs_are_errors_not_panics() {
    for (name, f, bytes) in FIXTURES {
        let r = replace(bytes);
        for cut in (0..r.entries.len()).step_by(7) {
            let _ = super::parse::parse(
                *f,
                &r.name,
                r.valid_hooks,
                &r.hook_entry,
                &r.underflow,
                &r.entries[..cut],
            );
        }
        let mut flipped = r.entries.to_vec();
        for i in (0..flipped.len()).step_by(13) {
            flipped[i] ^= 0xa5;
            let _ = super::parse::parse(
                *f,
                &r.name,
                r.valid_hooks,
                &r.hook_entry,
                &r.underflow,
                &flipped,
            );
            flipped[i] ^= 0xa5;
        }
        let _ = name;
    }
}

#[test]
fn a_user_chain_named_like_a_built_in_one_is_refused() {
    let mut t = blob::empty(V4, "nat").unwrap();
    ops::apply(&mut t, &[Op::NewChain("MINE".into())]).unwrap();
    let b = blob::build(&t).unwrap();
    // Rename MINE's ERROR head to OUTPUT, as only a hand-made blob could.
    let mut bytes = b.entries.clone();
    let at = bytes.windows(4).position(|w| w == b"MINE").unwrap();
    bytes[at..at + 6].copy_from_slice(b"OUTPUT");
    let err = super::parse::parse(
        V4,
        "nat",
        b.valid_hooks,
        &b.hook_entry,
        &b.underflow,
        &bytes,
    );
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("two chains named OUTPUT"));
    let ok = super::parse::parse(
        V4,
        "nat",
        b.valid_hooks,
        &b.hook_entry,
        &b.underflow,
        &b.entries,
    );
    assert!(ok.is_ok());
}

#[test]
fn a_rule_that_cannot_be_encoded_fails_the_build_naming_it() {
    let mut t = blob::empty(V4, "nat").unwrap();
    let v6 = Rule {
        dst: Some(crate::xtables::rule::Neg {
            inv: false,
            value: "::1/128".parse().unwrap(),
        }),
        target: Target::Return,
        ..Rule::any()
    };
    let long = Rule {
        oif: Some(crate::xtables::rule::Neg {
            inv: false,
            value: "a-sixteen-chars!".into(),
        }),
        ..Rule::any()
    };
    let port = Rule {
        matches: vec![Match::Port {
            dir: PortDir::Dst,
            port: 1,
            inv: false,
        }],
        ..Rule::any()
    };
    for (r, why) in [
        (v6, "address ::1/128 in an IPv4 rule"),
        (long, "longer than 15"),
        (port, "needs -p tcp or -p udp"),
    ] {
        let mut t = t.clone();
        ops::apply(&mut t, &[Op::Append("OUTPUT".into(), r)]).unwrap();
        let err = blob::build(&t).unwrap_err().to_string();
        assert!(err.contains("chain OUTPUT") && err.contains(why), "{err}");
    }
    ops::apply(
        &mut t,
        &[Op::NewChain("a-name-of-twenty-nine-chars-x".into())],
    )
    .unwrap_err();
}
