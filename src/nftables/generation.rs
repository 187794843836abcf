//! One consistent read of nf_tables state that takes several netlink dumps (tables, chains, rules, set
//! elements): each dump is consistent alone, but a change between two of them (a chain added after the
//! chain dump, a rule after the rule dump) could be missed by one CHECK. The standard remedy, as `nft`
//! itself does: read the ruleset generation id (`NFT_MSG_GETGEN`) before and after, and read again when it
//! changed, after a pause (production: the backoff of `contention`, holding the namespace lock our
//! writers' retries take), a bounded number of times; a ruleset that keeps changing fails closed.
//!
//! Pure: [`next`], the decision. [`stable`] runs it, with the generation read and the dumps passed in
//! (the effect, [`super::reader::genid`] on a socket in production).

use crate::error::{Error, Result};

/// How many times a read is made before a ruleset that keeps changing fails it (as many as a refused
/// batch is sent: our own concurrent converging writers into one namespace must not fail a read).
pub const READ_ATTEMPTS: u32 = 8;

/// What to do after attempt `attempt` (1-based) of a read that began at generation `before` and ended at
/// `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing changed during the read: it is one generation's state.
    Done,
    /// It changed: read again.
    Retry,
    /// It changed on every attempt: fail closed.
    Fail,
}

pub fn next(before: u32, after: u32, attempt: u32) -> Next {
    if before == after {
        Next::Done
    } else if attempt < READ_ATTEMPTS {
        Next::Retry
    } else {
        Next::Fail
    }
}

/// The error of a read whose ruleset changed on every attempt.
fn changing(what: &str) -> Error {
    Error::Rules(format!(
        "nftables: {what}: the ruleset changed while it was being read, {READ_ATTEMPTS} times in a row \
         (another program keeps changing this namespace's nftables rules); failing closed, retry later"
    ))
}

/// Runs `read` (given the generation read before it) between two reads of the generation with `gen`,
/// again while they differ ([`next`]), calling `pause` with the attempt that saw a change before the next
/// one; `what` names the read in the error.
pub fn stable<S: ?Sized, T>(
    s: &mut S,
    what: &str,
    gen: &mut dyn FnMut(&mut S) -> Result<u32>,
    read: &mut dyn FnMut(&mut S, u32) -> Result<T>,
    pause: &mut dyn FnMut(u32),
) -> Result<T> {
    let mut before = gen(s)?;
    for attempt in 1..=READ_ATTEMPTS {
        let v = read(s, before)?;
        let after = gen(s)?;
        match next(before, after, attempt) {
            Next::Done => return Ok(v),
            Next::Retry => {
                pause(attempt);
                before = gen(s)?;
            }
            Next::Fail => break,
        }
    }
    Err(changing(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_generation_is_done_a_change_retries_then_fails() {
        assert_eq!(next(7, 7, 1), Next::Done);
        assert_eq!(next(7, 7, READ_ATTEMPTS), Next::Done);
        assert_eq!(next(7, 8, 1), Next::Retry);
        assert_eq!(next(7, 8, READ_ATTEMPTS - 1), Next::Retry);
        assert_eq!(next(7, 8, READ_ATTEMPTS), Next::Fail);
        // A wrapped counter is a change too.
        assert_eq!(next(u32::MAX, 0, 1), Next::Retry);
    }

    /// A fake namespace: the generation the kernel reports, and the generations at which each read ran.
    struct Fake {
        genid: u32,
        /// How many reads change the ruleset while they run.
        changes_left: u32,
        reads: Vec<u32>,
    }

    fn run(f: &mut Fake, pauses: &mut Vec<u32>) -> Result<u32> {
        stable(
            f,
            "list rules",
            &mut |f: &mut Fake| Ok(f.genid),
            &mut |f: &mut Fake, g| {
                f.reads.push(g);
                if f.changes_left > 0 {
                    f.changes_left -= 1;
                    f.genid += 1;
                }
                Ok(g)
            },
            &mut |attempt| pauses.push(attempt),
        )
    }

    #[test]
    fn a_read_is_repeated_while_the_generation_changes_and_given_its_start() {
        let mut f = Fake {
            genid: 10,
            changes_left: 0,
            reads: Vec::new(),
        };
        let mut pauses = Vec::new();
        assert_eq!(run(&mut f, &mut pauses).unwrap(), 10);
        assert_eq!(f.reads, vec![10]);
        assert!(pauses.is_empty());

        let mut f = Fake {
            genid: 10,
            changes_left: READ_ATTEMPTS - 1,
            reads: Vec::new(),
        };
        assert_eq!(run(&mut f, &mut pauses).unwrap(), 10 + READ_ATTEMPTS - 1);
        assert_eq!(f.reads, (10..10 + READ_ATTEMPTS).collect::<Vec<_>>());
        // A pause after each attempt that saw a change, none after the last.
        assert_eq!(pauses, (1..READ_ATTEMPTS).collect::<Vec<_>>());
    }

    #[test]
    fn a_ruleset_changing_on_every_attempt_fails_closed_naming_the_read() {
        let mut f = Fake {
            genid: 1,
            changes_left: u32::MAX,
            reads: Vec::new(),
        };
        let e = run(&mut f, &mut Vec::new()).unwrap_err().to_string();
        assert_eq!(f.reads.len() as u32, READ_ATTEMPTS);
        assert!(e.contains("list rules"), "{e}");
        assert!(
            e.contains("changed while it was being read, 8 times in a row"),
            "{e}"
        );
    }
}
