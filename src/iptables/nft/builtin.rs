//! iptables-nft's tables and their built-in chains as base chains (pure): the exact hook, priority and
//! type iptables-nft gives each (research for issue 40, §2.1). A base chain with other parameters makes
//! iptables-nft-save declare the table incompatible, so these must match exactly.

/// One built-in chain: name, hook number, priority, chain type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    pub hooknum: u32,
    pub priority: i32,
    pub kind: &'static str,
}

const fn b(name: &'static str, hooknum: u32, priority: i32, kind: &'static str) -> Builtin {
    Builtin {
        name,
        hooknum,
        priority,
        kind,
    }
}

const FILTER: [Builtin; 3] = [
    b("INPUT", 1, 0, "filter"),
    b("FORWARD", 2, 0, "filter"),
    b("OUTPUT", 3, 0, "filter"),
];
const NAT: [Builtin; 4] = [
    b("PREROUTING", 0, -100, "nat"),
    b("INPUT", 1, 100, "nat"),
    b("OUTPUT", 3, -100, "nat"),
    b("POSTROUTING", 4, 100, "nat"),
];
const MANGLE: [Builtin; 5] = [
    b("PREROUTING", 0, -150, "filter"),
    b("INPUT", 1, -150, "filter"),
    b("FORWARD", 2, -150, "filter"),
    b("OUTPUT", 3, -150, "route"),
    b("POSTROUTING", 4, -150, "filter"),
];
const RAW: [Builtin; 2] = [
    b("PREROUTING", 0, -300, "filter"),
    b("OUTPUT", 3, -300, "filter"),
];
/// At 150, not the legacy security table's 50 (`NF_IP_PRI_SECURITY`): iptables-nft's own table gives its
/// chains 150 (its comment says `NF_IP_PRI_SECURITY`; 1.8.9 measured, root test
/// `iptables_nft_security_table_is_its_own`). Either way after our nat OUTPUT (-100).
const SECURITY: [Builtin; 3] = [
    b("INPUT", 1, 150, "filter"),
    b("FORWARD", 2, 150, "filter"),
    b("OUTPUT", 3, 150, "filter"),
];

/// The tables iptables-nft knows, in the order iptables-nft-save prints them (its table array's).
pub const TABLES: [&str; 5] = ["mangle", "security", "raw", "filter", "nat"];

/// The built-in chains of `table` in hook order (`None`: not an iptables table).
pub fn chains(table: &str) -> Option<&'static [Builtin]> {
    Some(match table {
        "filter" => &FILTER,
        "nat" => &NAT,
        "mangle" => &MANGLE,
        "raw" => &RAW,
        "security" => &SECURITY,
        _ => return None,
    })
}

/// `chain` as a built-in chain of `table`.
pub fn find(table: &str, chain: &str) -> Option<Builtin> {
    chains(table)?.iter().find(|c| c.name == chain).copied()
}
