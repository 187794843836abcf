//! The decision table's rows, one behaviour of the loop each.
use super::*;

fn err() -> Error {
    Error::other("boom")
}

fn changed(f: impl Fn(&mut Changes)) -> Event {
    let mut c = Changes::default();
    f(&mut c);
    Event::Changed(c)
}

/// A pass past its first install (binaries, kubeconfig, one round).
fn installed(once: bool) -> Pass {
    let mut p = Pass::new(once, Instant::now());
    for ev in [Event::Owner, Event::Binaries, Event::Kubeconfig] {
        next(&mut p, ev);
    }
    p
}

fn invalid(installed: bool, at: Instant) -> Event {
    Event::Invalid {
        reason: "entry missing".into(),
        installed,
        at,
    }
}

#[test]
fn a_signal_ends_the_loop_in_every_state() {
    for mut p in [
        Pass::new(false, Instant::now()),
        installed(false),
        installed(true),
    ] {
        assert!(matches!(
            next(&mut p, Event::Signal),
            Step::End(End::Stopped)
        ));
    }
}

#[test]
fn the_first_pass_installs_binaries_then_kubeconfig_then_validates() {
    let mut p = Pass::new(false, Instant::now());
    assert!(matches!(next(&mut p, Event::Owner), Step::Binaries));
    let s = next(&mut p, Event::Binaries);
    assert!(matches!(s, Step::Kubeconfig { rotation: false }), "{s:?}");
    assert!(matches!(next(&mut p, Event::Kubeconfig), Step::Round));
    // Nothing changed since: straight to a round.
    assert!(matches!(next(&mut p, Event::Owner), Step::Round));
}

#[test]
fn a_file_change_redoes_only_what_it_touches() {
    let mut p = installed(false);
    assert!(matches!(next(&mut p, changed(|c| c.bin = true)), Step::Top));
    assert!(matches!(next(&mut p, Event::Owner), Step::Binaries));
    assert!(matches!(next(&mut p, Event::Binaries), Step::Round));
    for touch in [
        |c: &mut Changes| c.service_account = true,
        |c: &mut Changes| c.run = true,
    ] {
        assert!(matches!(next(&mut p, changed(touch)), Step::Top));
        let s = next(&mut p, Event::Owner);
        assert!(matches!(s, Step::Kubeconfig { rotation: true }), "{s:?}");
        assert!(matches!(next(&mut p, Event::Kubeconfig), Step::Round));
    }
    // A conf-dir change is the round's to look at.
    assert!(matches!(
        next(&mut p, changed(|c| c.conf = true)),
        Step::Top
    ));
    assert!(matches!(next(&mut p, Event::Owner), Step::Round));
}

#[test]
fn taking_the_node_back_redoes_everything() {
    let mut p = installed(false);
    assert!(matches!(next(&mut p, Event::TookBack), Step::Binaries));
    let s = next(&mut p, Event::Binaries);
    assert!(matches!(s, Step::Kubeconfig { rotation: true }), "{s:?}");
    assert!(matches!(next(&mut p, Event::Kubeconfig), Step::Round));
}

#[test]
fn a_failure_ends_the_first_pass_and_once() {
    for f in [Failure::Binaries, Failure::Kubeconfig] {
        let mut p = Pass::new(false, Instant::now());
        assert!(matches!(
            next(&mut p, Event::Failed(f, err())),
            Step::Fail(_)
        ));
    }
    for f in [Failure::Binaries, Failure::Kubeconfig, Failure::Config] {
        let mut p = installed(true);
        assert!(matches!(
            next(&mut p, Event::Failed(f, err())),
            Step::Fail(_)
        ));
    }
}

#[test]
fn a_later_failure_waits_the_backoff_and_redoes_its_step() {
    let mut p = installed(false);
    let ms = Duration::from_millis;
    let s = next(&mut p, Event::Failed(Failure::Binaries, err()));
    assert!(
        matches!(s, Step::Wait { limit: Some(d), say: Say::Retry(_, r) } if d == ms(200) && r == d),
        "{s:?}"
    );
    // The wait ends on an unrelated change: the binaries are still redone.
    assert!(matches!(
        next(&mut p, changed(|c| c.conf = true)),
        Step::Top
    ));
    assert!(matches!(next(&mut p, Event::Owner), Step::Binaries));
    let s = next(&mut p, Event::Failed(Failure::Kubeconfig, err()));
    assert!(
        matches!(s, Step::Wait { limit: Some(d), .. } if d == ms(400)),
        "{s:?}"
    );
    assert!(matches!(
        next(&mut p, Event::Timer { deadline: false }),
        Step::Top
    ));
    let s = next(&mut p, Event::Owner);
    assert!(matches!(s, Step::Kubeconfig { rotation: true }), "{s:?}");
    assert!(matches!(next(&mut p, Event::Kubeconfig), Step::Round));
    let s = next(&mut p, Event::Failed(Failure::Config, err()));
    assert!(
        matches!(s, Step::Wait { limit: Some(d), .. } if d == ms(800)),
        "{s:?}"
    );
    // A written configuration resets the backoff.
    assert!(matches!(next(&mut p, Event::Written), Step::Top));
    let s = next(&mut p, Event::Failed(Failure::Config, err()));
    assert!(
        matches!(s, Step::Wait { limit: Some(d), .. } if d == ms(200)),
        "{s:?}"
    );
}

#[test]
fn a_timer_ends_once_at_its_deadline_and_else_looks_again() {
    let mut p = installed(true);
    let s = next(&mut p, Event::Timer { deadline: true });
    assert!(matches!(s, Step::End(End::TimedOut)), "{s:?}");
    assert!(matches!(
        next(&mut p, Event::Timer { deadline: false }),
        Step::Top
    ));
}

#[test]
fn readiness_ends_once() {
    let mut p = installed(true);
    assert!(matches!(
        next(&mut p, Event::Ready),
        Step::End(End::Installed)
    ));
}

#[test]
fn our_entry_missing_is_written_at_once_when_we_had_not_written_it() {
    let mut p = installed(false);
    let at = Instant::now();
    for _ in 0..100 {
        let s = next(&mut p, invalid(false, at));
        assert!(
            matches!(&s, Step::Write(r) if r == "entry missing"),
            "{s:?}"
        );
    }
}

#[test]
fn another_cni_rewriting_the_config_is_throttled_and_said_every_interval() {
    let t0 = Instant::now();
    let mut p = Pass::new(false, t0);
    for _ in 0..BURST as usize {
        assert!(matches!(next(&mut p, invalid(true, t0)), Step::Write(_)));
    }
    let s = next(&mut p, invalid(true, t0));
    assert!(
        matches!(&s, Step::Wait { limit: Some(d), say: Say::Conflict(r, 1) }
            if *d == Duration::from_secs_f64(1.0 / REFILL_PER_S) && r == "entry missing"),
        "{s:?}"
    );
    let s = next(&mut p, invalid(true, t0));
    assert!(
        matches!(
            s,
            Step::Wait {
                say: Say::Nothing,
                ..
            }
        ),
        "{s:?}"
    );
    // Refilled a token later.
    let t1 = t0 + Duration::from_secs_f64(1.0 / REFILL_PER_S);
    assert!(matches!(next(&mut p, invalid(true, t1)), Step::Write(_)));
    let s = next(&mut p, invalid(true, t1));
    assert!(
        matches!(
            s,
            Step::Wait {
                say: Say::Nothing,
                ..
            }
        ),
        "{s:?}"
    );
    // Said again once the interval has passed (the bucket full again too).
    let t2 = t0 + CONFLICT_LOG_INTERVAL;
    for _ in 0..BURST as usize {
        assert!(matches!(next(&mut p, invalid(true, t2)), Step::Write(_)));
    }
    let s = next(&mut p, invalid(true, t2));
    assert!(
        matches!(
            s,
            Step::Wait {
                say: Say::Conflict(_, 4),
                ..
            }
        ),
        "{s:?}"
    );
}

#[test]
fn a_preempted_pin_waits_and_is_said_every_interval() {
    let t0 = Instant::now();
    let mut p = installed(false);
    let pre = |at| Event::Preempted {
        reason: "another file".into(),
        at,
    };
    let s = next(&mut p, pre(t0));
    assert!(
        matches!(&s, Step::Wait { limit: Some(d), say: Say::Preempted(r) }
            if *d == CONFLICT_LOG_INTERVAL && r == "another file"),
        "{s:?}"
    );
    let ten = Duration::from_secs(10);
    let s = next(&mut p, pre(t0 + ten));
    assert!(
        matches!(s, Step::Wait { limit: Some(d), say: Say::Nothing } if d == CONFLICT_LOG_INTERVAL - ten),
        "{s:?}"
    );
    let s = next(&mut p, pre(t0 + CONFLICT_LOG_INTERVAL));
    assert!(
        matches!(
            s,
            Step::Wait {
                say: Say::Preempted(_),
                ..
            }
        ),
        "{s:?}"
    );
}

#[test]
fn a_newer_agent_before_the_write_goes_back_to_the_top() {
    let mut p = installed(false);
    assert!(matches!(next(&mut p, Event::Newer), Step::Top));
}

#[test]
fn no_primary_yet_is_said_once_until_written() {
    let mut p = installed(false);
    let waiting = || Event::Waiting("no primary".into());
    let s = next(&mut p, waiting());
    assert!(matches!(&s, Step::Wait { limit: None, say: Say::Waiting(w) } if w == "no primary"));
    let s = next(&mut p, waiting());
    assert!(
        matches!(
            s,
            Step::Wait {
                limit: None,
                say: Say::Nothing
            }
        ),
        "{s:?}"
    );
    assert!(matches!(next(&mut p, Event::Written), Step::Top));
    assert!(matches!(
        next(&mut p, waiting()),
        Step::Wait {
            say: Say::Waiting(_),
            ..
        }
    ));
}
