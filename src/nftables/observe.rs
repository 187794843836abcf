//! Reading a pod namespace's nf_tables state back (spec nftables.md §5), bounded and in one generation
//! ([`in_one_generation`]): the generation id and
//! the tables (with their flags) first, which is all a fresh namespace costs; then, only when our tables
//! exist or for CHECK, the chains, the rules of our tables (dumps filtered by table) and the rules of the
//! foreign base chains that run before ours or after them on our traffic (filtered by table and chain,
//! jumps followed), never the rest of a foreign ruleset. Replies are decoded as they arrive, and a namespace that makes us read more than
//! [`super::reader::MAX_OBJECTS`] objects or [`super::reader::MAX_BYTES`] bytes fails closed (a pod with `NET_ADMIN` controls its own
//! ruleset). Runs on a thread inside the pod's namespace.

use super::decode;
use super::encode::{self, Attrs, NFT_TABLE_F_DORMANT};
use super::expect;
use super::foreign::{self, BaseChain, Rules};
use super::generation;
use super::model::Table;
use super::reader::{genid, Reader};
use super::socket::Socket;
use super::state::{self, ChainState, Tables};
use crate::error::{Error, Result};
use crate::netfilter::{OurHook, NFPROTO_INET, NFPROTO_UNSPEC};
use std::collections::{BTreeMap, BTreeSet};

/// The first read: generation id, our tables with their flags, and the foreign tables that are dormant.
pub struct Head {
    pub genid: u32,
    pub ours: BTreeMap<String, u32>,
    dormant: BTreeSet<(u8, String)>,
    /// How many tables of any family are not ours (a fresh pod's namespace normally has none).
    pub others: usize,
}

/// Two round trips: all a fresh namespace costs.
pub fn head(r: &mut Reader) -> Result<Head> {
    let genid = genid(r.s)?;
    head_at(r, genid)
}

/// [`head`] with the generation id already read.
fn head_at(r: &mut Reader, genid: u32) -> Result<Head> {
    let mut ours = BTreeMap::new();
    let mut dormant = BTreeSet::new();
    let mut others = 0;
    let a = Attrs::default();
    r.dump(
        "list tables",
        encode::NFT_MSG_GETTABLE,
        NFPROTO_UNSPEC,
        &a,
        &mut |m| {
            let (name, flags) = decode::table(m)?;
            let family = decode::family(m).unwrap_or(0);
            if family == NFPROTO_INET && Table::from_name(&name).is_some() {
                ours.insert(name, flags);
                return Ok(());
            }
            others += 1;
            if flags & NFT_TABLE_F_DORMANT != 0 {
                dormant.insert((family, name));
            }
            Ok(())
        },
    )?;
    Ok(Head {
        genid,
        ours,
        dormant,
        others,
    })
}

/// Everything a decision needs beyond [`Head`].
pub struct Observed {
    pub ours: Tables,
    /// Our tables flagged dormant: none of their chains is hooked.
    pub dormant: Vec<String>,
    /// Foreign base chains before or after ours whose rules can move traffic (one line each).
    pub foreign: Vec<String>,
}

/// The chains: ours (into `ours`, for the tables in `head`) and the foreign base chains of tables that
/// are not dormant and not `skip`ped.
fn chains(
    r: &mut Reader,
    head: &Head,
    ours: &mut Tables,
    skip: &dyn Fn(u8, &str, &str) -> bool,
) -> Result<Vec<BaseChain>> {
    let mut base = Vec::new();
    let a = Attrs::default();
    r.dump(
        "list chains",
        encode::NFT_MSG_GETCHAIN,
        NFPROTO_UNSPEC,
        &a,
        &mut |m| {
            let c = decode::chain(m)?;
            let family = decode::family(m).unwrap_or(0);
            // Ours only where the caller reads our tables: in iptables mode (`ours` empty) an inet table
            // named like ours is anyone's, and its base chains are judged like any other.
            if family == NFPROTO_INET && ours.contains_key(&c.table) {
                if let Some(t) = ours.get_mut(&c.table) {
                    t.push(ChainState {
                        name: c.name,
                        base: c.base,
                        policy: c.policy,
                        rules: Vec::new(),
                    });
                }
            } else if let Some((_, hooknum, priority)) = c.base {
                if !head.dormant.contains(&(family, c.table.clone()))
                    && !skip(family, &c.table, &c.name)
                {
                    base.push(BaseChain {
                        family,
                        table: c.table,
                        chain: c.name,
                        hooknum,
                        priority,
                        devices: c.devices,
                    });
                }
            }
            Ok(())
        },
    )?;
    Ok(base)
}

/// The rules of every base chain in `base` that runs before `hooks` or after them where it could undo
/// the redirect ([`foreign::position`]), and of the chains they jump to.
fn foreign_rules(r: &mut Reader, base: &[BaseChain], hooks: &[OurHook]) -> Result<Rules> {
    let mut rules = Rules::new();
    let mut todo: Vec<(u8, String, String)> = base
        .iter()
        .filter(|c| foreign::position(c, hooks).is_some())
        .map(|c| (c.family, c.table.clone(), c.chain.clone()))
        .collect();
    while let Some(key) = todo.pop() {
        if rules.contains_key(&key) {
            continue;
        }
        let list: Vec<_> = r
            .rules(key.0, &key.1, Some(&key.2))?
            .into_iter()
            .map(|m| m.exprs)
            .collect();
        for c in foreign::jumps(&list) {
            todo.push((key.0, key.1.clone(), c));
        }
        rules.insert(key, list);
    }
    Ok(rules)
}

/// Our tables in full (set lookups resolved), our dormant tables and what runs before or after `hooks`.
pub fn observe(r: &mut Reader, head: &Head, hooks: &[OurHook]) -> Result<Observed> {
    let mut ours: Tables = head.ours.keys().map(|n| (n.clone(), Vec::new())).collect();
    let base = chains(r, head, &mut ours, &|_, _, _| false)?;
    let mut sets: BTreeMap<(String, String), String> = BTreeMap::new();
    for (table, chains) in ours.iter_mut() {
        for rule in r.rules(NFPROTO_INET, table, None)? {
            let mut exprs = Vec::new();
            for e in rule.exprs {
                exprs.push(match e {
                    super::expr::Expr::Lookup {
                        sreg, set, flags, ..
                    } => {
                        let key = (table.clone(), set.clone());
                        let elems = match sets.get(&key) {
                            Some(v) => v.clone(),
                            None => {
                                let v = set_elements(r, table, &set)?;
                                sets.insert(key, v.clone());
                                v
                            }
                        };
                        super::expr::Expr::Lookup {
                            sreg,
                            set: elems,
                            set_id: None,
                            flags,
                        }
                    }
                    e => e,
                });
            }
            if let Some(c) = chains.iter_mut().find(|c| c.name == rule.chain) {
                c.rules.push(exprs);
            }
        }
    }
    let rules = foreign_rules(r, &base, hooks)?;
    Ok(Observed {
        ours,
        dormant: head
            .ours
            .iter()
            .filter(|(_, f)| *f & NFT_TABLE_F_DORMANT != 0)
            .map(|(n, _)| n.clone())
            .collect(),
        foreign: foreign::findings(&base, &rules, hooks),
    })
}

/// [`head`] and then `more`, read in one generation ([`generation::stable`]): a change between the
/// dumps makes them read again (a bounded number of times, then fail closed), so one CHECK cannot miss a
/// chain or rule added between two of them. `what` names the read in the error.
pub fn in_one_generation<T>(
    s: &mut Socket,
    what: &str,
    more: &mut dyn FnMut(&mut Reader, &Head) -> Result<T>,
) -> Result<(Head, T)> {
    let mut pause = RetryPause::default();
    generation::stable(
        s,
        what,
        &mut |s: &mut Socket| genid(s),
        &mut |s, g| {
            let mut r = Reader::new(s);
            let head = head_at(&mut r, g)?;
            let v = more(&mut r, &head)?;
            Ok((head, v))
        },
        &mut |attempt| pause.wait(attempt),
    )
}

/// The pause before reading a changed ruleset again: the namespace lock our writers' retries take
/// ([`super::contention::namespace_lock`], held until the read ends, so our own concurrent converging ADDs
/// cannot keep changing it), then the same growing backoff.
#[derive(Default)]
pub struct RetryPause {
    held: Option<nix::fcntl::Flock<std::fs::File>>,
}

impl RetryPause {
    pub fn wait(&mut self, attempt: u32) {
        if self.held.is_none() {
            self.held = super::contention::namespace_lock();
        }
        std::thread::sleep(super::contention::backoff(attempt));
    }
}

/// A kernel without nf_tables (a legacy-only node): no socket for the family, or no nf_tables subsystem
/// behind it (nfnetlink answers `EINVAL` for a subsystem it cannot load). Then no nf_tables rule exists.
pub fn no_nf_tables(e: &Error) -> bool {
    let Error::Io { source, .. } = e.root() else {
        return false;
    };
    matches!(
        source.raw_os_error().map(nix::errno::Errno::from_raw),
        Some(
            nix::errno::Errno::EPROTONOSUPPORT
                | nix::errno::Errno::EINVAL
                | nix::errno::Errno::EOPNOTSUPP
        )
    )
}

/// A netfilter netlink socket in the current thread's namespace; `None` on a kernel without one
/// ([`no_nf_tables`]), where neither nf_tables nor ctnetlink can hold anything.
pub fn socket_if_any() -> Result<Option<Socket>> {
    match Socket::open() {
        Ok(s) => Ok(Some(s)),
        Err(e) if no_nf_tables(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// For a backend that is not nf_tables native (iptables mode): the foreign base chains that run before
/// `hooks` and can move traffic, leaving out the chains `skip` names (the ones that backend's own dump
/// already covers), read over `s`.
pub fn foreign_only(
    s: &mut Socket,
    hooks: &[OurHook],
    skip: &dyn Fn(u8, &str, &str) -> bool,
) -> Result<Vec<String>> {
    let read = in_one_generation(s, "read the foreign chains", &mut |r, head| {
        let base = chains(r, head, &mut Tables::new(), skip)?;
        let rules = foreign_rules(r, &base, hooks)?;
        Ok(foreign::findings(&base, &rules, hooks))
    });
    match read {
        Ok((_, found)) => Ok(found),
        Err(e) if no_nf_tables(&e) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The conntrack expectations of `s`'s namespace, both families ([`super::expect`]): one line per
/// expectation. No ctnetlink in the kernel (the dump is refused as an nf_tables one is without nf_tables):
/// then none was made through it, and a helper that makes one is assigned by a rule, which is named where
/// it runs.
pub fn expectation_findings(s: &mut Socket) -> Result<Vec<String>> {
    let mut exps = Vec::new();
    for family in [super::conntrack::AF_INET, super::conntrack::AF_INET6] {
        let seq = s.next_seq(1);
        let read = s.dump(
            "conntrack: dump the expectations",
            &expect::dump_request(family, seq),
            &mut |m| {
                exps.push(expect::expectation(m)?);
                Ok(())
            },
        );
        match read {
            // That family's dump refused as without ctnetlink: none of that family, and what the other
            // family's dump found is kept.
            Ok(()) => {}
            Err(e) if no_nf_tables(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(expect::findings(&exps))
}

/// Whether the current thread's namespace holds any nf_tables table, of any family: one table dump (no
/// nf_tables in the kernel: none). What a fresh iptables-mode ADD asks before writing
/// ([`crate::iptables::apply`]): a fresh pod's namespace normally holds none.
pub fn any_table() -> Result<bool> {
    let Some(mut s) = socket_if_any()? else {
        return Ok(false);
    };
    let mut r = Reader::new(&mut s);
    let mut any = false;
    let read = r.dump(
        "list tables",
        encode::NFT_MSG_GETTABLE,
        NFPROTO_UNSPEC,
        &Attrs::default(),
        &mut |_| {
            any = true;
            Ok(())
        },
    );
    match read {
        Ok(()) => Ok(any),
        Err(e) if no_nf_tables(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn set_elements(r: &mut Reader, table: &str, set: &str) -> Result<String> {
    let mut a = Attrs::default();
    a.str(encode::NFTA_SET_ELEM_LIST_TABLE, table)
        .str(encode::NFTA_SET_ELEM_LIST_SET, set);
    let mut keys = Vec::new();
    r.dump(
        "list set elements",
        encode::NFT_MSG_GETSETELEM,
        NFPROTO_INET,
        &a,
        &mut |m| {
            keys.extend(decode::set_elems(m)?.1);
            Ok(())
        },
    )?;
    Ok(state::resolved(&keys))
}
