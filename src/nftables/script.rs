//! The knftables transaction text of a [`Transaction`] (nftables.md §2.3): what upstream pipes to
//! `nft -f -` and what the conformance goldens hold, byte for byte. `explain --nft` prints it; the plugin
//! never needs it (it sends netlink, [`super::encode`]).

use super::generate::Transaction;
use super::model::{rule_text, TABLES};

pub fn script(tx: &Transaction) -> String {
    let mut out = String::new();
    for t in TABLES {
        let ops: Vec<_> = tx.ops.iter().filter(|o| o.table == t).collect();
        if ops.is_empty() {
            continue;
        }
        let name = t.name();
        out.push_str(&format!("add table inet {name}\nflush table inet {name}\n"));
        for &c in t.chains() {
            if !ops.iter().any(|o| o.chain == c) {
                continue;
            }
            match t.hook(c) {
                Some(h) => out.push_str(&format!(
                    "add chain inet {name} {c} {{ type {} hook {} priority {} ; }}\n",
                    h.kind, h.hook, h.priority
                )),
                None => out.push_str(&format!("add chain inet {name} {c}\n")),
            }
        }
        for o in ops {
            match o.insert {
                Some(n) => out.push_str(&format!(
                    "insert rule inet {name} {} index {n} {}\n",
                    o.chain,
                    rule_text(&o.items)
                )),
                None => out.push_str(&format!(
                    "add rule inet {name} {} {}\n",
                    o.chain,
                    rule_text(&o.items)
                )),
            }
        }
    }
    out
}
