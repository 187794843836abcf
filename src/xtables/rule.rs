//! One x_tables rule as both backends hold it (pure): what `iptables-nft` encodes as nf_tables expressions and
//! `iptables-legacy` as an `ipt_entry` with its matches and target. Only the options our generator writes
//! (redirect/rules*.rs; research in issue 40) are modelled; a rule read from the kernel with anything else
//! keeps a description of it in [`Match::Other`] / [`Target::Other`], so it can never compare equal to one
//! of ours and is never silently rewritten.
//!
//! Text: [`super::spec`] parses rule specs (`-p tcp --dport 15008 -j RETURN`, as restore documents and
//! `iptables-save` write them) into this and renders this back exactly as `iptables-save` (1.8.7-1.8.11)
//! prints it.

use ipnet::IpNet;

/// The transport protocols `-p` takes in our rules (`IPPROTO_TCP`, `IPPROTO_UDP`).
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// `--ctstate` bits (`XT_CONNTRACK_STATE_BIT`): INVALID 1, ESTABLISHED 2, RELATED 4, NEW 8, UNTRACKED 64.
pub const CT_INVALID: u32 = 1;
pub const CT_ESTABLISHED: u32 = 2;
pub const CT_RELATED: u32 = 4;
pub const CT_NEW: u32 = 8;
pub const CT_UNTRACKED: u32 = 64;

/// A value and whether `!` negates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neg<T> {
    pub inv: bool,
    pub value: T,
}

/// Which port of the transport header `--sport` / `--dport` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortDir {
    Src,
    Dst,
}

/// Which id `-m owner` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerKind {
    Uid,
    Gid,
}

/// `CONNMARK --save-mark` / `--restore-mark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnmarkMode {
    Save,
    Restore,
}

/// One `-m` match, in rule order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// `-m tcp|udp [!] --sport|--dport P` (the protocol is the rule's `-p`).
    Port { dir: PortDir, port: u16, inv: bool },
    /// `-m multiport [!] --dports P1,P2,...` (destination ports; at most 15).
    Multiport { ports: Vec<u16>, inv: bool },
    /// `-m owner [!] --uid-owner N` / `--gid-owner N` (numeric: names are resolved before).
    Owner { kind: OwnerKind, id: u32, inv: bool },
    /// `-m mark [!] --mark V[/M]`.
    Mark { mark: u32, mask: u32, inv: bool },
    /// `-m conntrack --ctstate S1,S2` (the [`CT_INVALID`]... bits).
    Conntrack { states: u32 },
    /// `-m connmark [!] --mark V[/M]`.
    Connmark { mark: u32, mask: u32, inv: bool },
    /// Anything else read from the kernel: how to name it (never equal to a rule of ours).
    Other(String),
}

/// A rule's target (`-j`), or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// No `-j`: on to the next rule.
    None,
    Accept,
    Drop,
    Return,
    /// `-j CHAIN` (a user chain of the same table).
    Jump(String),
    /// `-j REDIRECT --to-ports P`.
    Redirect {
        port: u16,
    },
    /// `-j MARK --set-xmark V/M` (`--set-mark V` is `V/0xffffffff`).
    Mark {
        mark: u32,
        mask: u32,
    },
    /// `-j CONNMARK --save-mark|--restore-mark --nfmask N --ctmask C`.
    Connmark {
        mode: ConnmarkMode,
        nfmask: u32,
        ctmask: u32,
    },
    /// `-j TPROXY --on-port P --on-ip 0.0.0.0|:: --tproxy-mark V/M` (the address is always unspecified in
    /// our rules).
    Tproxy {
        port: u16,
        mark: u32,
        mask: u32,
    },
    /// `-j CT --zone Z`.
    Ct {
        zone: u16,
    },
    /// Anything else read from the kernel: how to name it.
    Other(String),
}

/// One rule: the `ipt_entry` header fields, matches in order, the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `-s`: masked network (`/32`, `/128` for hosts).
    pub src: Option<Neg<IpNet>>,
    pub dst: Option<Neg<IpNet>>,
    /// `-i` / `-o`: an interface name, `+` at the end a prefix wildcard.
    pub iif: Option<Neg<String>>,
    pub oif: Option<Neg<String>>,
    /// `-p`: [`TCP`], [`UDP`] or another protocol number; never negated in our rules.
    pub proto: Option<u8>,
    pub matches: Vec<Match>,
    pub target: Target,
}

impl Rule {
    /// A rule matching everything, with no target.
    pub fn any() -> Rule {
        Rule {
            src: None,
            dst: None,
            iif: None,
            oif: None,
            proto: None,
            matches: Vec::new(),
            target: Target::None,
        }
    }
}

/// A chain of a table: built-in (`PREROUTING`, `OUTPUT`, ...) or a user chain, rules in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// One table (`nat`, `mangle`, `raw`) of one family: chains in the order `iptables-save` prints them
/// (built-ins in hook order, then user chains sorted by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub chains: Vec<Chain>,
}

/// One line of an `iptables-restore --noflush` document, applied to one table in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `-N C`: creates a user chain; fails when it exists, and with it the whole document (the fast
    /// path's guard: a namespace that already has our chains takes the slow path).
    NewChain(String),
    /// `-F C`: removes every rule of the chain.
    Flush(String),
    /// `-X C`: deletes an empty user chain nothing jumps to.
    DeleteChain(String),
    /// `-A C rule`: appends, creating a built-in chain when the table does not have it yet.
    Append(String, Rule),
    /// `-I C n rule`: inserts at position `n` (from 1).
    Insert(String, usize, Rule),
    /// `-D C rule`: deletes the first rule of the chain equal to it; fails when there is none.
    Delete(String, Rule),
}

/// The operations of one `*table ... COMMIT` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableOps {
    pub table: String,
    pub ops: Vec<Op>,
}
