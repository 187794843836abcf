//! How iptables mode's rules reach the kernel. By default directly, with no process: iptables-nft's own
//! nf_tables objects over netlink ([`crate::iptables::nft`]) or iptables-legacy's x_tables blob over its
//! socket options ([`crate::xtables::legacy`]), from the same restore documents the node's tools would
//! read ([`crate::xtables::spec`]). Only where an operator asks for it (IPTABLES_NODE_BINARIES, for a
//! kernel or an encoding we do not speak) does the plugin run the node's `iptables-restore`/`-save`
//! instead ([`super::exec`], on its PATH); the node's agents never do.

use super::nft;
use super::{exec, save, Backend};
use crate::error::{Context, Error, Result};
use crate::netfilter::Family;
use crate::xtables::{chain_name, legacy, names, rule::Table, save_text, spec};

/// What [`Io::inspect`] read of one family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The tables as `iptables-save` prints them.
    pub text: String,
    /// iptables-nft's chains that iptables-nft would not have made (see [`Io::inspect`]).
    pub incompatible: Vec<String>,
    /// Our tables flagged dormant (none of their chains hooked), one line each.
    pub dormant: Vec<String>,
    /// Chain names iptables would refuse ([`chain_name::refused`]): with one, `text` cannot be trusted.
    pub refused_names: Vec<String>,
    /// Whose tables `text` lists: the legacy x_tables (`Some(true)`) or iptables-nft's; `None` when the
    /// node's unsuffixed `iptables-save` listed no table, so which it is cannot be told.
    pub legacy: Option<bool>,
}

/// One backend, and whether its node binaries are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Io {
    pub backend: Backend,
    pub node_binaries: bool,
}

impl Io {
    /// The kernel's interfaces for `backend`.
    pub fn kernel(backend: Backend) -> Io {
        Io {
            backend,
            node_binaries: false,
        }
    }

    /// Whether the rules live in the legacy x_tables (an unsuffixed `iptables` run by us is legacy:
    /// iptables 1.8 and later install suffixed `-nft`/`-legacy` tools, so a node with only the unsuffixed
    /// one has an older, legacy-only iptables).
    fn legacy(self) -> bool {
        !matches!(self.backend, Backend::Nft)
    }

    /// Applies a restore document with `iptables-restore --noflush` semantics (each table all or nothing)
    /// in the current thread's namespace. With the node's binaries, a table of the document that holds our
    /// chains and is flagged dormant is then woken as our own batch wakes it: the node's iptables-nft sends
    /// no table flags.
    pub fn restore(self, family: Family, doc: &str) -> Result<()> {
        if self.node_binaries {
            exec::restore(self.backend, family, doc)?;
            return self.wake(family, doc);
        }
        let ops = spec::parse_doc(family, doc, &names::system)?;
        let what = || format!("write the {} rules ({})", family.name(), self.name());
        if self.legacy() {
            legacy::restore(family, &ops).with_context(what)
        } else {
            nft::restore(family, &ops).with_context(what)
        }
    }

    /// Whether our rules are in the legacy x_tables as the backend alone says it: `None` for the node's
    /// unsuffixed iptables, which may be either (its `-save` text says which, [`Inspection::legacy`]).
    pub fn ours_legacy(self) -> Option<bool> {
        match (self.backend, self.node_binaries) {
            (Backend::Plain, true) => None,
            _ => Some(self.legacy()),
        }
    }

    /// Whether iptables-nft's tables (ip/ip6 nf_tables) can hold our rules: iptables-nft, or the node's
    /// unsuffixed iptables (which may be iptables-nft; ours, an unsuffixed iptables is legacy).
    fn nft_may_hold_ours(self) -> bool {
        match self.backend {
            Backend::Nft => true,
            Backend::Plain => self.node_binaries,
            Backend::Legacy => false,
        }
    }

    /// After the node's `iptables-restore` applied `doc`: wakes those of its tables (its `*table` lines)
    /// that hold our chains and are flagged dormant ([`nft::wake_dormant`]). Our own writer's batch wakes
    /// them itself.
    fn wake(self, family: Family, doc: &str) -> Result<()> {
        if !self.nft_may_hold_ours() {
            return Ok(());
        }
        let tables: Vec<String> = doc
            .lines()
            .filter_map(|l| l.trim().strip_prefix('*'))
            .map(|t| t.trim().to_string())
            .collect();
        let woken = nft::wake_dormant(family, &tables).with_context(|| {
            format!(
                "wake the dormant {} tables ({})",
                family.name(),
                self.name()
            )
        })?;
        for w in woken {
            log::info!("{}: woke {w}", family.name());
        }
        Ok(())
    }

    /// The current thread's namespace's tables of this backend, as `iptables-save` prints them. Fails
    /// when a chain name there is one iptables refuses: the text would not say what the kernel holds.
    pub fn save(self, family: Family) -> Result<String> {
        if self.node_binaries {
            return exec::save(self.backend, family);
        }
        let what = || format!("read the {} rules ({})", family.name(), self.name());
        let tables = if self.legacy() {
            legacy::save(family).with_context(what)?
        } else {
            nft::save(family).with_context(what)?
        };
        let refused = self.refused_names(family, &tables);
        if !refused.is_empty() {
            return Err(Error::Rules(format!(
                "cannot read the {} rules: {}; remove these chains from the pod's network namespace",
                family.name(),
                refused.join("; ")
            )));
        }
        Ok(spec::save_text(family, &tables))
    }

    /// [`Io::save`]'s text, the chain names in it iptables would refuse (instead of failing), and from the
    /// same read what the text cannot show: iptables-nft's chains of `family` that iptables-nft would not
    /// have made (a built-in chain not hooked, or hooked with another type, hook or priority, a policy other
    /// than ACCEPT), each of which can keep our jumps from running, and our tables flagged dormant (none of
    /// their chains hooked). None of this for the legacy tables (the kernel fixes their hooks). With the
    /// node's binaries see `inspect_node_save`.
    pub fn inspect(self, family: Family) -> Result<Inspection> {
        if self.node_binaries {
            return self.inspect_node_save(family);
        }
        let what = || {
            format!(
                "read the {} rules and chains ({})",
                family.name(),
                self.name()
            )
        };
        if self.legacy() {
            let tables = legacy::save(family).with_context(what)?;
            return Ok(Inspection {
                text: spec::save_text(family, &tables),
                refused_names: self.refused_names(family, &tables),
                legacy: Some(true),
                ..Inspection::default()
            });
        }
        let i = nft::inspect(family).with_context(what)?;
        Ok(Inspection {
            text: spec::save_text(family, &i.tables),
            refused_names: self.refused_names(family, &i.tables),
            incompatible: i.incompatible,
            dormant: i.dormant,
            legacy: Some(false),
        })
    }

    /// [`Io::inspect`] with the node's binaries: the text is their `-save`'s, and the rest comes from our
    /// own read of the tables that tool lists, iptables-nft's ([`nft::inspect_if_any`]) or the legacy ones:
    /// which, the backend says, or for the node's unsuffixed iptables the text's own first line
    /// ([`save_text::printed_by_nft`]; the pod's namespace cannot write it). That `-save` shows no table
    /// flags, lists a built-in chain made without its hook as one more user chain, prints a rule holding an
    /// expression iptables never writes otherwise than it is (`nft::Inspection::acting`), and leaves out a
    /// table it calls incompatible (then named by [`save_text::refused_in_text`]). Its text must also list
    /// the tables, chains and rule counts our own read of those tables holds, a rule's `-j` words its target
    /// ([`save::unlike_kernel`]): a bare name holding a newline can print a table of its own. Never the
    /// other backend's read: the pod can fill those tables to look like whatever the text says.
    fn inspect_node_save(self, family: Family) -> Result<Inspection> {
        let text = self.save(family)?;
        let tool = self.tool(family);
        let legacy = match self.backend {
            Backend::Nft => Some(false),
            Backend::Legacy => Some(true),
            Backend::Plain => save_text::printed_by_nft(&text).map(|nft| !nft),
        };
        let mut out = Inspection {
            refused_names: save_text::refused_in_text(&tool, &text),
            text,
            legacy,
            ..Inspection::default()
        };
        // No table printed (the node's unsuffixed tool, whichever it is, listed none): nothing in the text
        // to check, and none of our rules in it (CHECK names them missing, a re-ADD fails).
        let kernel = match legacy {
            None => return Ok(out),
            Some(false) => {
                let i = nft::inspect_if_any(family).with_context(|| {
                    format!(
                        "read the {} tables' chains and flags ({})",
                        family.name(),
                        self.name()
                    )
                })?;
                out.incompatible = i.incompatible;
                out.incompatible
                    .extend(i.acting.iter().map(|a| format!("{tool} {a}")));
                out.dormant = i.dormant;
                i.tables
            }
            Some(true) => legacy::save(family).with_context(|| {
                format!("read the {} legacy tables ({})", family.name(), self.name())
            })?,
        };
        // Only text with iptables-save's structure is compared (other text is refused already).
        if out.refused_names.is_empty() {
            out.refused_names = save::unlike_kernel(&tool, &out.text, &kernel);
        }
        Ok(out)
    }

    /// [`chain_name::refused`] (names and rule texts iptables-save text cannot carry) for `tables`, named as
    /// this backend's tool lists them.
    fn refused_names(self, family: Family, tables: &[Table]) -> Vec<String> {
        chain_name::refused(&self.tool(family), family, tables)
    }

    /// How the backend's own tool for `family` is named in findings: `iptables-nft (IPv4)`.
    fn tool(self, family: Family) -> String {
        format!("{} ({})", self.backend.command(family), family.name())
    }

    /// `nft`, `legacy`, or the node's binaries' name.
    pub fn name(self) -> String {
        match (self.node_binaries, self.legacy()) {
            (true, _) => format!("{} binaries", self.backend.command(Family::V4)),
            (false, true) => "iptables-legacy, x_tables socket options".into(),
            (false, false) => "iptables-nft, nf_tables netlink".into(),
        }
    }
}
