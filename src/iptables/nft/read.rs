//! Reading iptables-nft's tables of one family back: three dumps (tables, chains, rules), in one ruleset
//! generation, on a `NETLINK_NETFILTER` socket in the calling thread's namespace (the effect), assembled purely into
//! [`CurrentTable`]s (rules with their handles, kernel order) and into the model's [`Table`]s in the order
//! iptables-nft-save prints them: every built-in chain of the table in hook order (whether the kernel has
//! it or not, as iptables-nft-save prints them), then user chains sorted by name. Each table keeps whether
//! it is dormant (`NFT_TABLE_F_DORMANT`: none of its chains is hooked), which the rule model cannot show.

use super::builtin;
use super::decode_rule;
use super::plan::{CurrentChain, CurrentTable};
use super::xexpr;
use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::nftables::decode::{self, Msg};
use crate::nftables::encode::{self, Attrs, NFT_TABLE_F_DORMANT};
use crate::nftables::generation;
use crate::nftables::observe::RetryPause;
use crate::nftables::reader::genid;
use crate::nftables::socket::Socket;
use crate::xtables::rule::{Chain, Rule, Table};

/// At most this many objects are read (a pod with `NET_ADMIN` controls its own ruleset).
const MAX_OBJECTS: usize = 100_000;

/// One dumped rule: table, chain, handle, expressions.
pub struct RuleMsg {
    pub table: String,
    pub chain: String,
    pub handle: u64,
    pub exprs: Vec<xexpr::XExpr>,
}

/// A `NEWRULE` dump message, keeping the compatibility expressions' info.
pub fn rule_msg(m: &Msg) -> Result<RuleMsg> {
    let a = decode::nft_attrs(m)?;
    let get = |ty: u16| decode::get(&a, ty);
    let s = |ty: u16| get(ty).map(decode::string);
    let bad = || Error::other("malformed netlink reply: rule without table, chain or handle");
    let handle = get(encode::NFTA_RULE_HANDLE)
        .and_then(|p| p.get(..8))
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(bad)?;
    let exprs = match get(encode::NFTA_RULE_EXPRESSIONS) {
        Some(list) => xexpr::decode(list)?,
        None => Vec::new(),
    };
    Ok(RuleMsg {
        table: s(encode::NFTA_RULE_TABLE).ok_or_else(bad)?,
        chain: s(encode::NFTA_RULE_CHAIN).ok_or_else(bad)?,
        handle,
        exprs,
    })
}

/// Assembles the dumps (`tables` as `(name, flags)`): iptables tables only, chains in dump order, rules
/// decoded in kernel order.
pub fn assemble(
    family: Family,
    tables: &[(String, u32)],
    chains: &[decode::ChainMsg],
    rules: &[RuleMsg],
) -> Vec<CurrentTable> {
    let mut out = Vec::new();
    for (t, flags) in builtin::TABLES.iter().filter_map(|t| {
        let flags = tables.iter().find(|(x, _)| x == t)?.1;
        Some((t, flags))
    }) {
        let chains = chains
            .iter()
            .filter(|c| c.table == *t)
            .map(|c| CurrentChain {
                name: c.name.clone(),
                base: c.base.is_some(),
                hook: c.base.clone(),
                policy: c.policy,
                rules: rules
                    .iter()
                    .filter(|r| r.table == *t && r.chain == c.name)
                    .map(|r| (r.handle, decode_rule::decode(family, &r.exprs)))
                    .collect(),
            })
            .collect();
        out.push(CurrentTable {
            name: t.to_string(),
            dormant: flags & NFT_TABLE_F_DORMANT != 0,
            chains,
        });
    }
    out
}

/// The model's tables, chains in iptables-nft-save's order.
pub fn tables(current: &[CurrentTable]) -> Vec<Table> {
    current
        .iter()
        .map(|t| {
            let rules = |name: &str| -> Vec<Rule> {
                let c = t.chains.iter().find(|c| c.name == name);
                c.map(|c| c.rules.iter().map(|(_, r)| r.clone()).collect())
                    .unwrap_or_default()
            };
            let builtins = builtin::chains(&t.name).unwrap_or(&[]);
            let mut chains: Vec<Chain> = builtins
                .iter()
                .map(|b| Chain {
                    name: b.name.to_string(),
                    rules: rules(b.name),
                })
                .collect();
            let mut user: Vec<&str> = t
                .chains
                .iter()
                .map(|c| c.name.as_str())
                .filter(|n| !builtins.iter().any(|b| b.name == *n))
                .collect();
            user.sort_unstable();
            chains.extend(user.into_iter().map(|n| Chain {
                name: n.to_string(),
                rules: rules(n),
            }));
            Table {
                name: t.name.clone(),
                chains,
            }
        })
        .collect()
}

/// Every table, chain and rule of `family` (the effect), read in one generation
/// ([`generation::stable`]: a change between the dumps reads them again, a ruleset that keeps changing
/// fails closed), with that generation's id.
pub fn read(s: &mut Socket, family: Family) -> Result<(u32, Vec<CurrentTable>)> {
    let what = format!("iptables-nft ({}): read the tables", family.name());
    let mut pause = RetryPause::default();
    generation::stable(
        s,
        &what,
        &mut |s: &mut Socket| genid(s),
        &mut |s, g| Ok((g, read_once(s, family)?)),
        &mut |attempt| pause.wait(attempt),
    )
}

/// The tables, chains and rules of `family`, three dumps.
fn read_once(s: &mut Socket, family: Family) -> Result<Vec<CurrentTable>> {
    let mut n = 0usize;
    let bound = |n: &mut usize| {
        *n += 1;
        match *n > MAX_OBJECTS {
            true => Err(Error::Rules(format!(
                "iptables-nft ({}): more than {MAX_OBJECTS} objects to read; failing closed",
                family.name()
            ))),
            false => Ok(()),
        }
    };
    let fam = family.nfproto();
    let none = Attrs::default();
    let mut tables = Vec::new();
    let seq = s.next_seq(1);
    let req = encode::dump_request(encode::NFT_MSG_GETTABLE, fam, seq, &none);
    s.dump("list tables", &req, &mut |m| {
        bound(&mut n)?;
        tables.push(decode::table(m)?);
        Ok(())
    })?;
    let (mut chains, mut rules) = (Vec::new(), Vec::new());
    if builtin::TABLES
        .iter()
        .any(|t| tables.iter().any(|(x, _)| x == t))
    {
        let seq = s.next_seq(1);
        let req = encode::dump_request(encode::NFT_MSG_GETCHAIN, fam, seq, &none);
        s.dump("list chains", &req, &mut |m| {
            bound(&mut n)?;
            chains.push(decode::chain(m)?);
            Ok(())
        })?;
        let seq = s.next_seq(1);
        let req = encode::dump_request(encode::NFT_MSG_GETRULE, fam, seq, &none);
        s.dump("list rules", &req, &mut |m| {
            bound(&mut n)?;
            rules.push(rule_msg(m)?);
            Ok(())
        })?;
    }
    Ok(assemble(family, &tables, &chains, &rules))
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
