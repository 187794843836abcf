//! The decision table's rows, one behaviour of the loop each: events fed in order, the steps read back
//! in short.
use super::*;

/// A step in short: its kind, with the wait's limit and what it says.
fn short(s: Step) -> String {
    match s {
        Step::Kubeconfig { rotation } => {
            format!("Kubeconfig{}", if rotation { " rotation" } else { "" })
        }
        Step::Write(r) => format!("Write {r}"),
        Step::Wait { limit, say } => format!(
            "Wait {limit:?} {}",
            match say {
                Say::Nothing => "".into(),
                Say::Retry(e, d) => format!("retry {e} {d:?}"),
                Say::Conflict(r, n) => format!("conflict {r} {n}"),
                Say::Preempted(r) => format!("preempted {r}"),
                Say::Waiting(w) => format!("waiting {w}"),
                Say::Binary(r) => format!("binary {r}"),
            }
        ),
        Step::Fail(e) => format!("Fail {e}"),
        other => format!("{other:?}"),
    }
}

fn steps(p: &mut Pass, events: impl IntoIterator<Item = Event>) -> Vec<String> {
    events.into_iter().map(|ev| short(next(p, ev))).collect()
}

fn changed(f: impl Fn(&mut Changes)) -> Event {
    let mut c = Changes::default();
    f(&mut c);
    Event::Changed(c)
}

fn failed(f: Failure) -> Event {
    Event::Failed(f, Error::other("boom"))
}

/// A pass past its first install (binaries, kubeconfig, one round).
fn installed(once: bool) -> Pass {
    let mut p = Pass::new(once, Instant::now());
    steps(&mut p, [Event::Owner, Event::Binaries, Event::Kubeconfig]);
    p
}

fn invalid(installed: bool, at: Instant) -> Event {
    let reason = "missing".into();
    Event::Invalid {
        reason,
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
        assert_eq!(steps(&mut p, [Event::Signal]), ["End(Stopped)"]);
    }
}

#[test]
fn the_first_pass_installs_binaries_then_kubeconfig_then_validates() {
    let mut p = Pass::new(false, Instant::now());
    let evs = [
        Event::Owner,
        Event::Binaries,
        Event::Kubeconfig,
        Event::Owner,
    ];
    assert_eq!(
        steps(&mut p, evs),
        ["Binaries", "Kubeconfig", "Round", "Round"]
    );
}

#[test]
fn a_file_change_redoes_only_what_it_touches() {
    let mut p = installed(false);
    let bin = [changed(|c| c.bin = true), Event::Owner, Event::Binaries];
    assert_eq!(steps(&mut p, bin), ["Top", "Binaries", "Round"]);
    let token = [
        changed(|c| c.service_account = true),
        Event::Owner,
        Event::Kubeconfig,
    ];
    assert_eq!(
        steps(&mut p, token),
        ["Top", "Kubeconfig rotation", "Round"]
    );
    let run = [changed(|c| c.run = true), Event::Owner];
    assert_eq!(steps(&mut p, run), ["Top", "Kubeconfig rotation"]);
    // A conf-dir change is the round's to look at.
    let conf = [Event::Kubeconfig, changed(|c| c.conf = true), Event::Owner];
    assert_eq!(steps(&mut p, conf), ["Round", "Top", "Round"]);
}

#[test]
fn taking_the_node_back_redoes_everything() {
    let mut p = installed(false);
    let evs = [Event::TookBack, Event::Binaries, Event::Kubeconfig];
    assert_eq!(
        steps(&mut p, evs),
        ["Binaries", "Kubeconfig rotation", "Round"]
    );
}

#[test]
fn a_failure_ends_the_first_pass_and_once() {
    for f in [Failure::Binaries, Failure::Kubeconfig] {
        let mut p = Pass::new(false, Instant::now());
        assert_eq!(steps(&mut p, [failed(f)]), ["Fail boom"]);
    }
    for f in [Failure::Binaries, Failure::Kubeconfig, Failure::Config] {
        assert_eq!(steps(&mut installed(true), [failed(f)]), ["Fail boom"]);
    }
}

#[test]
fn a_later_failure_waits_the_backoff_and_redoes_its_step() {
    let mut p = installed(false);
    // The wait ends on an unrelated change: the binaries are still redone.
    let evs = [
        failed(Failure::Binaries),
        changed(|c| c.conf = true),
        Event::Owner,
    ];
    let want = ["Wait Some(200ms) retry boom 200ms", "Top", "Binaries"];
    assert_eq!(steps(&mut p, evs), want);
    let evs = [
        failed(Failure::Kubeconfig),
        Event::Timer { deadline: false },
        Event::Owner,
    ];
    let want = [
        "Wait Some(400ms) retry boom 400ms",
        "Top",
        "Kubeconfig rotation",
    ];
    assert_eq!(steps(&mut p, evs), want);
    // A written configuration resets the backoff.
    let evs = [
        failed(Failure::Config),
        Event::Written,
        failed(Failure::Config),
    ];
    let want = [
        "Wait Some(800ms) retry boom 800ms",
        "Top",
        "Wait Some(200ms) retry boom 200ms",
    ];
    assert_eq!(steps(&mut p, evs), want);
}

#[test]
fn a_failed_step_keeps_what_the_pass_had_still_to_do() {
    // The token changes together with the binaries, and installing the binaries fails: once they are
    // installed the kubeconfig is still rewritten with the new token.
    let mut p = installed(false);
    let evs = [
        changed(|c| {
            c.bin = true;
            c.service_account = true;
        }),
        Event::Owner,
        failed(Failure::Binaries),
        Event::Timer { deadline: false },
        Event::Owner,
        Event::Binaries,
        Event::Kubeconfig,
    ];
    let want = [
        "Top",
        "Binaries",
        "Wait Some(200ms) retry boom 200ms",
        "Top",
        "Binaries",
        "Kubeconfig rotation",
        "Round",
    ];
    assert_eq!(steps(&mut p, evs), want);
}

#[test]
fn a_timer_ends_once_at_its_deadline_and_else_looks_again() {
    let evs = [
        Event::Timer { deadline: false },
        Event::Timer { deadline: true },
    ];
    assert_eq!(steps(&mut installed(true), evs), ["Top", "End(TimedOut)"]);
}

#[test]
fn readiness_ends_once() {
    assert_eq!(
        steps(&mut installed(true), [Event::Ready]),
        ["End(Installed)"]
    );
}

#[test]
fn our_entry_missing_is_written_at_once_when_we_had_not_written_it() {
    let at = Instant::now();
    let got = steps(&mut installed(false), (0..100).map(|_| invalid(false, at)));
    assert_eq!(got, vec!["Write missing"; 100]);
}

#[test]
fn another_cni_rewriting_the_config_is_throttled_and_said_every_interval() {
    let t0 = Instant::now();
    let token = Duration::from_secs_f64(1.0 / REFILL_PER_S);
    let mut p = Pass::new(false, t0);
    let mut want = vec!["Write missing".to_string(); BURST as usize];
    want.push(format!("Wait Some({token:?}) conflict missing 1"));
    want.push(format!("Wait Some({token:?}) "));
    assert_eq!(
        steps(&mut p, (0..BURST as usize + 2).map(|_| invalid(true, t0))),
        want
    );
    // A token refilled later; the next conflict is not said again within the interval.
    let t1 = t0 + token;
    let got = steps(&mut p, [invalid(true, t1), invalid(true, t1)]);
    assert_eq!(
        got,
        [
            "Write missing".to_string(),
            format!("Wait Some({token:?}) ")
        ]
    );
    // Said again once the interval has passed (the bucket full again by then).
    let t2 = t0 + CONFLICT_LOG_INTERVAL;
    let got = steps(&mut p, (0..BURST as usize + 1).map(|_| invalid(true, t2)));
    assert_eq!(
        got.last().unwrap(),
        &format!("Wait Some({token:?}) conflict missing 4")
    );
}

#[test]
fn a_preempted_pin_waits_and_is_said_every_interval() {
    let t0 = Instant::now();
    let pre = |s| Event::Preempted {
        reason: "elsewhere".into(),
        at: t0 + Duration::from_secs(s),
    };
    let got = steps(&mut installed(false), [pre(0), pre(10), pre(30)]);
    assert_eq!(
        got,
        [
            "Wait Some(30s) preempted elsewhere",
            "Wait Some(20s) ",
            "Wait Some(30s) preempted elsewhere"
        ]
    );
}

#[test]
fn an_unrunnable_binary_is_installed_again_then_waited_for_until_a_change() {
    let unrunnable = || Event::Binary("0644".into());
    let mut p = installed(false);
    let evs = [
        unrunnable(),
        Event::Owner,
        Event::Binaries,
        // Still unrunnable right after (UPDATE_CNI_BINARIES=false keeps the file): no loop of installs.
        unrunnable(),
        unrunnable(),
        // A change in the bin dir: installed again once more.
        changed(|c| c.bin = true),
        Event::Owner,
        Event::Binaries,
        unrunnable(),
    ];
    assert_eq!(
        steps(&mut p, evs),
        [
            "Top",
            "Binaries",
            "Round",
            "Wait None binary 0644",
            "Wait None binary 0644",
            "Top",
            "Binaries",
            "Round",
            "Top",
        ]
    );
    // `--once`: still unrunnable after installing it again ends the run.
    let mut p = installed(true);
    let got = steps(
        &mut p,
        [unrunnable(), Event::Owner, Event::Binaries, unrunnable()],
    );
    assert_eq!(got[..3], ["Top", "Binaries", "Round"]);
    assert!(got[3].starts_with("Fail 0644"), "{got:?}");
}

#[test]
fn a_newer_agent_before_the_write_goes_back_to_the_top() {
    assert_eq!(steps(&mut installed(false), [Event::Newer]), ["Top"]);
}

#[test]
fn no_primary_yet_is_said_once_until_written() {
    let waiting = || Event::Waiting("no primary".into());
    let evs = [waiting(), waiting(), Event::Written, waiting()];
    let said = "Wait None waiting no primary";
    assert_eq!(
        steps(&mut installed(false), evs),
        [said, "Wait None ", "Top", said]
    );
}
