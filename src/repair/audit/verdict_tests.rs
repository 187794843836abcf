use super::*;

fn found(ours: &[&str], bypass: &[&str]) -> Findings {
    Findings {
        ours: ours.iter().map(|s| s.to_string()).collect(),
        bypass: bypass.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_verdict_names_the_rule_and_a_bypass_comes_first() {
    assert_eq!(Verdict::of(&found(&[], &[])), Verdict::Redirected);
    assert_eq!(
        Verdict::of(&found(&["IPv4: missing -t nat -N ISTIO_OUTPUT"], &[])),
        Verdict::Missing("IPv4: missing -t nat -N ISTIO_OUTPUT".into())
    );
    let v = Verdict::of(&found(
        &["IPv4: missing -t nat -A OUTPUT -j ISTIO_OUTPUT"],
        &[
            "iptables-nft (IPv4) -t raw OUTPUT rule 1: -j CT --notrack",
            "x",
        ],
    ));
    assert_eq!(
        v,
        Verdict::Bypassed("iptables-nft (IPv4) -t raw OUTPUT rule 1: -j CT --notrack; x".into())
    );
    assert_eq!(v.state(), "bypassed");
    assert_eq!(v.event_reason(), Some("RedirectBypassed"));
    assert!(v.unredirected());
    let u = Verdict::Unverifiable("no host /proc".into());
    assert!(!u.unredirected());
    assert_eq!(u.event_reason(), Some("RedirectUnverifiable"));
    assert_eq!(Verdict::Redirected.event_reason(), None);
    assert_eq!(
        STATES.map(|s| s.to_string()),
        [
            Verdict::Redirected,
            Verdict::Missing(String::new()),
            Verdict::Bypassed(String::new()),
            u
        ]
        .map(|v| v.state().to_string())
    );
}

#[test]
fn a_change_is_logged_once_and_an_unredirected_one_gets_one_event_and_one_action() {
    let missing = Verdict::Missing("m".into());
    let seen = |v: &Verdict, retry| Seen {
        uid: "u1".into(),
        verdict: v.clone(),
        retry,
    };
    let step = |log, event, act| Step { log, event, act };
    // First seen redirected: nothing to say. First seen missing: all of it.
    let quiet = step(false, false, false);
    assert_eq!(Seen::next(None, "u1", &Verdict::Redirected), quiet);
    let all = step(true, true, true);
    assert_eq!(Seen::next(None, "u1", &missing), all);
    // Still missing the next round: nothing again, unless the action failed (then only the action).
    assert_eq!(
        Seen::next(Some(&seen(&missing, false)), "u1", &missing),
        quiet
    );
    assert_eq!(
        Seen::next(Some(&seen(&missing, true)), "u1", &missing),
        step(false, false, true)
    );
    // Repaired: redirected again is logged, nothing else.
    assert_eq!(
        Seen::next(Some(&seen(&missing, false)), "u1", &Verdict::Redirected),
        step(true, false, false)
    );
    // Missing → bypassed, or another rule: news again.
    let b1 = Verdict::Bypassed("r1".into());
    assert_eq!(Seen::next(Some(&seen(&missing, false)), "u1", &b1), all);
    assert_eq!(
        Seen::next(
            Some(&seen(&b1, false)),
            "u1",
            &Verdict::Bypassed("r2".into())
        ),
        all
    );
    // Unverifiable is logged on a change and gets its Event when it becomes so (not silence), never an
    // action; a new reason text is logged, not another Event.
    let u = Verdict::Unverifiable("why".into());
    assert_eq!(
        Seen::next(Some(&seen(&Verdict::Redirected, false)), "u1", &u),
        step(true, true, false)
    );
    assert_eq!(Seen::next(None, "u1", &u), step(true, true, false));
    assert_eq!(
        Seen::next(Some(&seen(&missing, false)), "u1", &u),
        step(true, true, false)
    );
    assert_eq!(Seen::next(Some(&seen(&u, false)), "u1", &u), quiet);
    assert_eq!(
        Seen::next(
            Some(&seen(&u, false)),
            "u1",
            &Verdict::Unverifiable("other".into())
        ),
        step(true, false, false)
    );
    // Another UID under the name is another pod: what the old one was does not count.
    assert_eq!(
        Seen::next(Some(&seen(&missing, false)), "u2", &missing),
        all
    );
    assert_eq!(
        Seen::next(Some(&seen(&missing, true)), "u2", &Verdict::Redirected),
        quiet
    );
}

#[test]
fn the_mode_acts_as_on_a_broken_pod_but_repair_never_touches_a_bypass() {
    let f = PodFacts {
        selected: true,
        ..PodFacts::default()
    };
    let m = Verdict::Missing("m".into());
    let b = Verdict::Bypassed("b".into());
    let o = |repair, delete, label| Options {
        repair_pods: repair,
        delete_pods: delete,
        label_pods: label,
        ..Options::default()
    };
    assert_eq!(action_for(&m, &f, &o(true, true, true)), Action::Repair);
    assert_eq!(action_for(&b, &f, &o(true, true, true)), Action::None);
    assert_eq!(action_for(&m, &f, &o(false, true, true)), Action::Delete);
    assert_eq!(action_for(&b, &f, &o(false, true, false)), Action::Delete);
    assert_eq!(action_for(&b, &f, &o(false, false, true)), Action::Label);
    let labeled = PodFacts {
        labeled: true,
        ..f.clone()
    };
    assert_eq!(
        action_for(&b, &labeled, &o(false, false, true)),
        Action::LabelSkip
    );
    assert_eq!(action_for(&m, &f, &o(false, false, false)), Action::None);
    for v in [Verdict::Redirected, Verdict::Unverifiable("x".into())] {
        assert_eq!(action_for(&v, &f, &o(false, true, false)), Action::None);
    }
    // Disabled agent, or a pod outside its selectors: report only.
    let off = Options {
        enabled: false,
        ..o(false, true, false)
    };
    assert_eq!(action_for(&m, &f, &off), Action::None);
    assert_eq!(
        action_for(&m, &PodFacts::default(), &o(false, true, false)),
        Action::None
    );
}

#[test]
fn the_one_shot_prints_a_line_or_json_per_pod() {
    assert_eq!(line("ns/a", &Verdict::Redirected), "ns/a redirected");
    assert_eq!(
        line(
            "ns/b",
            &Verdict::Bypassed("raw OUTPUT rule 1: -j CT --notrack".into())
        ),
        "ns/b bypassed raw OUTPUT rule 1: -j CT --notrack"
    );
    let j = json("ns/c", &Verdict::Unverifiable("no \"netns\"".into()));
    let v = crate::json::parse_object(&j, "t").unwrap();
    assert_eq!(crate::json::str_of(&v, "pod"), Some("ns/c"));
    assert_eq!(crate::json::str_of(&v, "verdict"), Some("unverifiable"));
    assert_eq!(crate::json::str_of(&v, "detail"), Some("no \"netns\""));
}
