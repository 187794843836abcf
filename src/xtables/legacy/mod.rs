//! `iptables-legacy` without exec: a pod's x_tables tables written and read over their socket options,
//! as `iptables-legacy-restore --noflush` and `iptables-legacy-save` do (issue 40).
//!
//! [`restore`] applies a restore document's operations per table: it reads the table (`GET_INFO` +
//! `GET_ENTRIES`, which also instantiates it, as the tool does), applies the operations in memory
//! ([`ops`]), lays the whole table out as libiptc does ([`blob`]: [`entry`] per rule, [`exts`] per match
//! and target; [`parse`] reads it back) and swaps it in with one `SET_REPLACE` (`kernel`), then hands the counters of the
//! entries it kept back with `SET_ADD_COUNTERS`. Each table is atomic on its own; rules that are not ours
//! (anything the decoder cannot model) are kept byte for byte, only their jumps moved.
//! [`save`] reads every legacy table that exists into the shared model.

pub mod blob;
pub mod entry;
pub mod exts;
mod kernel;
pub mod ops;
pub mod parse;

use crate::error::{Error, IoContext, Result};
use crate::netfilter::Family;
use crate::xtables::entries::Info;
use crate::xtables::rule::{Table, TableOps};
use crate::xtables::sockopt::{self, ATTEMPTS};
use nix::errno::Errno;

fn is_v6(family: Family) -> bool {
    family == Family::V6
}

/// Table `name` as the kernel returns it: its `GET_INFO` and its entries (counters and `comefrom`
/// filled in by the kernel). Asking instantiates the table when it does not exist yet.
pub fn read_raw(family: Family, name: &str) -> Result<(Info, Vec<u8>)> {
    sockopt::read(is_v6(family), name)
}

/// Reads table `name` (instantiating it if it does not exist yet) into memory, with its entry count.
pub fn read_table(family: Family, name: &str) -> Result<(blob::Table, u32)> {
    let (info, bytes) = sockopt::read(is_v6(family), name)?;
    let t = parse::parse(
        family,
        name,
        info.valid_hooks,
        &info.hook_entry,
        &info.underflow,
        &bytes,
    )
    .map_err(|e| {
        Error::Rules(format!(
            "legacy iptables ({}) table {name}: {e}",
            family.name()
        ))
    })?;
    Ok((t, info.num_entries))
}

fn refused(family: Family, name: &str, e: Errno) -> Error {
    let why = match e {
        Errno::ENOENT => {
            "the kernel lacks an extension or revision the table uses (module not loadable?)"
        }
        Errno::EINVAL => {
            "the kernel refused the table as malformed (an extension option it does not accept)"
        }
        Errno::ELOOP => "the table's jumps form a loop",
        _ => "the kernel refused it",
    };
    Error::io(
        format!(
            "write the legacy iptables table {name} ({}): {why}",
            family.name()
        ),
        std::io::Error::from(e),
    )
}

/// Applies `doc` in the current thread's network namespace, one table after the other, each atomically
/// (`iptables-legacy-restore --noflush`): a failing operation (`-N` of a chain that exists, `-D` of a
/// rule that is not there, ...) fails with nothing of that table written.
pub fn restore(family: Family, doc: &[TableOps]) -> Result<()> {
    for t in doc {
        restore_table(family, t)?;
    }
    Ok(())
}

fn restore_table(family: Family, t: &TableOps) -> Result<()> {
    let (fd, level) = kernel::open(is_v6(family))?;
    for _ in 0..ATTEMPTS {
        let (mut table, num_counters) = read_table(family, &t.table)?;
        ops::apply(&mut table, &t.ops)?;
        let built = blob::build(&table)?;
        let old = match kernel::replace(&fd, level, &t.table, &built, num_counters) {
            Ok(old) => old,
            // The table changed between our read and our write: read it again.
            Err(Errno::EAGAIN) => continue,
            Err(e) => return Err(refused(family, &t.table, e)),
        };
        // The kernel starts the new entries at zero: hand each kept rule (and policy) its old counters,
        // as libiptc does. The table is in place already, so a failure here (the table replaced again
        // in between) loses counters only: it is logged, not returned.
        let mut counters = vec![0u8; built.old.len() * kernel::COUNTER_SIZE];
        for (new, o) in built.old.iter().enumerate() {
            let from =
                o.and_then(|o| old.get(o * kernel::COUNTER_SIZE..(o + 1) * kernel::COUNTER_SIZE));
            if let Some(c) = from {
                counters[new * kernel::COUNTER_SIZE..(new + 1) * kernel::COUNTER_SIZE]
                    .copy_from_slice(c);
            }
        }
        if let Err(e) = kernel::add_counters(&fd, level, &t.table, &counters) {
            log::warn!(
                "legacy iptables ({}) table {}: rules written, counters not handed back: {e}",
                family.name(),
                t.table
            );
        }
        return Ok(());
    }
    Err(Error::Rules(format!(
        "legacy iptables ({}) table {}: it kept changing while we wrote it ({ATTEMPTS} attempts)",
        family.name(),
        t.table
    )))
}

/// The names of the legacy tables that exist in the current thread's namespace (none when the x_tables
/// module is not loaded). Never asks for a table by name: that would instantiate it.
pub fn table_names(family: Family) -> Result<Vec<String>> {
    let path = match family {
        Family::V4 => "/proc/thread-self/net/ip_tables_names",
        Family::V6 => "/proc/thread-self/net/ip6_tables_names",
    };
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t
            .lines()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).io_context(|| format!("read {path}")),
    }
}

/// Every legacy table of the current thread's namespace, decoded (`iptables-legacy-save`): in
/// `/proc/net/ip{,6}_tables_names` order, chains as the tool lists them; a rule we do not model names
/// what it holds in [`Match::Other`](crate::xtables::rule::Match::Other) /
/// [`Target::Other`](crate::xtables::rule::Target::Other).
pub fn save(family: Family) -> Result<Vec<Table>> {
    table_names(family)?
        .iter()
        .map(|name| read_table(family, name).map(|(t, _)| blob::model(&t)))
        .collect()
}

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod table_tests;
