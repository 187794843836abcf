//! The audit's pure core: a pod's verdict from what CHECK read ([`Verdict::of`]), whether a verdict is a
//! change worth a log line and an Event and whether to act on it this round ([`Seen::next`], with the
//! pod's [`Backoff`]), what the repair agent's enabled mode does about it ([`action_for`]), and the
//! one-shot's output (a line, a JSON object).

use crate::json::write_string;
use crate::netfilter::bypass::Findings;
use crate::repair::detect::{Action, PodFacts};
use crate::repair::options::Options;

/// A running sidecar pod's verdict; the text names the rule (bypassed) or says why (missing,
/// unverifiable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Redirected,
    /// Our rules are not present and complete for the pod's current annotations.
    Missing(String),
    /// A rule the kernel runs before our redirect can take its traffic past it.
    Bypassed(String),
    /// The pod could not be verified (no namespace found, no host `/proc`, a read bound exceeded, ...).
    Unverifiable(String),
}

/// The four states, in the order of `istio_cni_audit_pods{state}`.
pub const STATES: [&str; 4] = ["redirected", "missing", "bypassed", "unverifiable"];

impl Verdict {
    /// From CHECK's findings: anything that bypasses our rules first (it is the one a repair in place
    /// cannot fix: never "fixed" by deleting someone else's rules), then our rules' problems.
    pub fn of(f: &Findings) -> Verdict {
        if !f.bypass.is_empty() {
            Verdict::Bypassed(f.bypass.join("; "))
        } else if !f.ours.is_empty() {
            Verdict::Missing(f.ours.join("; "))
        } else {
            Verdict::Redirected
        }
    }

    /// Its index in [`STATES`].
    pub fn index(&self) -> usize {
        match self {
            Verdict::Redirected => 0,
            Verdict::Missing(_) => 1,
            Verdict::Bypassed(_) => 2,
            Verdict::Unverifiable(_) => 3,
        }
    }

    /// `redirected`, `missing`, `bypassed` or `unverifiable`.
    pub fn state(&self) -> &'static str {
        STATES[self.index()]
    }

    /// The rule or the reason ("" when redirected).
    pub fn detail(&self) -> &str {
        match self {
            Verdict::Redirected => "",
            Verdict::Missing(s) | Verdict::Bypassed(s) | Verdict::Unverifiable(s) => s,
        }
    }

    /// Missing or bypassed: the pod runs unredirected (an Event, the one-shot's exit 1).
    pub fn unredirected(&self) -> bool {
        matches!(self, Verdict::Missing(_) | Verdict::Bypassed(_))
    }

    /// The Event's reason for a verdict other than redirected: `RedirectMissing`, `RedirectBypassed`, or
    /// `RedirectUnverifiable` (the audit cannot tell whether the pod is redirected: never silence).
    pub fn event_reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Missing(_) => Some("RedirectMissing"),
            Verdict::Bypassed(_) => Some("RedirectBypassed"),
            Verdict::Unverifiable(_) => Some("RedirectUnverifiable"),
            Verdict::Redirected => None,
        }
    }

    /// The log line's and the Event's text: `missing: <what>` and so on.
    pub fn describe(&self) -> String {
        match self {
            Verdict::Redirected => "redirected".into(),
            v => format!("{}: {}", v.state(), v.detail()),
        }
    }
}

/// The most rounds between two actions on a pod that stays unredirected (the back-off's cap: 32 minutes
/// at the default interval).
pub const MAX_BACKOFF_ROUNDS: u64 = 32;

/// The back-off of the actions on one pod that stays unredirected round after round (a repair undone
/// again, an action that fails): after its n-th action in a row the next may come 2^(n-1) rounds later
/// (the next round, then 2, 4, ... rounds, at most [`MAX_BACKOFF_ROUNDS`]). Reset when the pod is seen
/// redirected; kept with the pod, so forgotten with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Actions in a row since the pod was last seen redirected.
    pub acts: u32,
    /// The first round number at which the next action may come.
    pub next_round: u64,
}

impl Backoff {
    /// Whether an action may come in round `round`.
    pub fn due(&self, round: u64) -> bool {
        round >= self.next_round
    }

    /// The back-off after one more action, taken in round `round`.
    pub fn acted(self, round: u64) -> Backoff {
        let acts = self.acts.saturating_add(1);
        let wait = 1u64
            .checked_shl(acts - 1)
            .unwrap_or(u64::MAX)
            .min(MAX_BACKOFF_ROUNDS);
        Backoff {
            acts,
            next_round: round.saturating_add(wait),
        }
    }
}

/// What the audit remembers of a pod between rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub uid: String,
    pub verdict: Verdict,
    /// When the next action on it may come.
    pub backoff: Backoff,
}

/// What to do about a pod's verdict this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Log the verdict (it changed).
    pub log: bool,
    /// Write the pod's Event (it became missing or bypassed, or the rule changed; it became unverifiable).
    pub event: bool,
    /// Act through the repair agent's mode: it is unredirected and its back-off lets an action come now
    /// (every round's `missing`, not only a change: a repair undone before the next round is repaired
    /// again).
    pub act: bool,
    /// The pod's back-off before this round's action (reset when it is redirected).
    pub backoff: Backoff,
}

impl Seen {
    /// What a new `verdict` for the pod with `uid` calls for, given what was seen last (`prev`; another
    /// UID is another pod). A pod first seen redirected is not news; any other change is, once. An
    /// unverifiable pod gets its Event when it becomes unverifiable, not again while only the reason's
    /// text changes (a pid, a count), so a pod that stays unreadable is one Event, not one a round.
    /// `round` is the audit's round number (from 1).
    pub fn next(prev: Option<&Seen>, uid: &str, verdict: &Verdict, round: u64) -> Step {
        let prev = prev.filter(|p| p.uid == uid);
        let before = prev.map_or(&Verdict::Redirected, |p| &p.verdict);
        let changed = before != verdict;
        let news = verdict.unredirected() && changed;
        let blind =
            matches!(verdict, Verdict::Unverifiable(_)) && before.index() != verdict.index();
        let backoff = match (verdict, prev) {
            (Verdict::Redirected, _) | (_, None) => Backoff::default(),
            (_, Some(p)) => p.backoff,
        };
        Step {
            log: changed,
            event: news || blind,
            act: verdict.unredirected() && backoff.due(round),
            backoff,
        }
    }
}

/// What the repair agent's enabled mode does about an unredirected pod (the first enabled wins, as for a
/// broken pod): repair in place re-applies a `missing` pod's rules, and leaves a `bypassed` one alone (it
/// would have to delete someone else's rules); delete and label act on both; no mode: nothing.
pub fn action_for(v: &Verdict, f: &PodFacts, o: &Options) -> Action {
    if !v.unredirected() || !o.enabled || !f.selected {
        Action::None
    } else {
        crate::repair::detect::mode_action(f, o, matches!(v, Verdict::Missing(_)))
    }
}

/// The one-shot's line: `<ns>/<name> <verdict>[ <rule or reason>]`.
pub fn line(key: &str, v: &Verdict) -> String {
    match v.detail() {
        "" => format!("{key} {}", v.state()),
        d => format!("{key} {} {d}", v.state()),
    }
}

/// The one-shot's JSON for one pod: `{"pod":"ns/name","verdict":"...","detail":"..."}`.
pub fn json(key: &str, v: &Verdict) -> String {
    let mut s = String::from(r#"{"pod":"#);
    write_string(&mut s, key);
    s.push_str(r#","verdict":"#);
    write_string(&mut s, v.state());
    s.push_str(r#","detail":"#);
    write_string(&mut s, v.detail());
    s.push('}');
    s
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
