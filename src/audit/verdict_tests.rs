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
fn a_change_is_logged_once_and_an_unredirected_one_gets_one_event_and_an_action_each_due_round() {
    let missing = Verdict::Missing("m".into());
    // Seen in round 1 with no action yet (its back-off lets one come at once).
    let seen = |v: &Verdict| Seen {
        uid: "u1".into(),
        verdict: v.clone(),
        backoff: Backoff::default(),
    };
    // (log, event, act) of a verdict in round 2.
    let next = |prev: Option<&Seen>, uid: &str, v: &Verdict| {
        let s = Seen::next(prev, uid, v, 2);
        (s.log, s.event, s.act)
    };
    // First seen redirected: nothing to say. First seen missing: all of it.
    let quiet = (false, false, false);
    assert_eq!(next(None, "u1", &Verdict::Redirected), quiet);
    let all = (true, true, true);
    assert_eq!(next(None, "u1", &missing), all);
    // Still missing the next round: no log line or Event again, but the action again (a repair undone
    // before this round is repaired again), as its back-off allows.
    assert_eq!(
        next(Some(&seen(&missing)), "u1", &missing),
        (false, false, true)
    );
    let waiting = Seen {
        backoff: Backoff::default().acted(1).acted(2),
        ..seen(&missing)
    };
    assert_eq!(next(Some(&waiting), "u1", &missing), quiet);
    assert!(Seen::next(Some(&waiting), "u1", &missing, 4).act);
    // Repaired: redirected again is logged, nothing else, and the back-off starts over.
    let back = Seen::next(Some(&waiting), "u1", &Verdict::Redirected, 3);
    assert_eq!((back.log, back.event, back.act), (true, false, false));
    assert_eq!(back.backoff, Backoff::default());
    // Missing → bypassed, or another rule: news again.
    let b1 = Verdict::Bypassed("r1".into());
    assert_eq!(next(Some(&seen(&missing)), "u1", &b1), all);
    assert_eq!(
        next(Some(&seen(&b1)), "u1", &Verdict::Bypassed("r2".into())),
        all
    );
    // News does not jump the back-off: logged and an Event, the action when it is due.
    assert_eq!(
        next(
            Some(&Seen {
                verdict: b1.clone(),
                ..waiting.clone()
            }),
            "u1",
            &missing
        ),
        (true, true, false)
    );
    // Unverifiable is logged on a change and gets its Event when it becomes so (not silence), never an
    // action; a new reason text is logged, not another Event. It keeps the back-off (only redirected
    // resets it).
    let u = Verdict::Unverifiable("why".into());
    assert_eq!(
        next(Some(&seen(&Verdict::Redirected)), "u1", &u),
        (true, true, false)
    );
    assert_eq!(next(None, "u1", &u), (true, true, false));
    assert_eq!(next(Some(&seen(&missing)), "u1", &u), (true, true, false));
    assert_eq!(next(Some(&seen(&u)), "u1", &u), quiet);
    assert_eq!(
        next(
            Some(&seen(&u)),
            "u1",
            &Verdict::Unverifiable("other".into())
        ),
        (true, false, false)
    );
    let blind = Seen::next(Some(&waiting), "u1", &u, 9);
    assert_eq!(blind.backoff, waiting.backoff);
    // Another UID under the name is another pod: what the old one was (and its back-off) does not count.
    assert_eq!(next(Some(&seen(&missing)), "u2", &missing), all);
    assert_eq!(next(Some(&waiting), "u2", &missing), all);
    assert_eq!(next(Some(&waiting), "u2", &Verdict::Redirected), quiet);
}

#[test]
fn the_back_off_doubles_per_action_in_a_row_up_to_its_cap() {
    let b = Backoff::default();
    assert!(b.due(0) && b.due(1));
    // Acted in round 1: the next round may act again.
    let b = b.acted(1);
    assert_eq!(
        b,
        Backoff {
            acts: 1,
            next_round: 2
        }
    );
    assert!(!b.due(1) && b.due(2));
    // Then 2, 4, 8, 16, 32 rounds later, never more.
    let mut b = b.acted(2);
    assert_eq!(b.next_round, 4);
    let mut waits = vec![];
    let mut round = 4;
    for _ in 0..10 {
        let n = b.acted(round);
        waits.push(n.next_round - round);
        round = n.next_round;
        b = n;
    }
    assert_eq!(waits, [4, 8, 16, 32, 32, 32, 32, 32, 32, 32]);
    assert_eq!(MAX_BACKOFF_ROUNDS, 32);
    // No overflow however long a pod stays unredirected.
    let far = Backoff {
        acts: u32::MAX,
        next_round: u64::MAX,
    };
    assert_eq!(
        far.acted(u64::MAX),
        Backoff {
            acts: u32::MAX,
            next_round: u64::MAX
        }
    );
    assert_eq!(
        Backoff {
            acts: 70,
            next_round: 0
        }
        .acted(5)
        .next_round,
        5 + MAX_BACKOFF_ROUNDS
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
