//! iptables-legacy without exec against the real kernel (root): every conformance document (capture v4
//! and v6, pod) restored by us (`xtables::legacy::restore`, one `IPT_SO_SET_REPLACE` per table) into one
//! namespace and by the node's `iptables-legacy-restore --noflush` into another gives the same
//! `iptables-legacy-save` text per table, the same kernel blob byte for byte and the same decoded model
//! (`legacy::save`); a second restore fails on its `-N` and changes nothing; a converge document
//! (`state::converge_document`) and a rule of another program (`-m comment`) behave as with the tool.

use crate::support::cmd::without_counters;
use crate::support::xt::{documents, names, node_restore, node_restore_ok, prefix};
use crate::support::{conformance_dir, require_root, Netns, TempDir};
use istio_cni::iptables::{save, state};
use istio_cni::netfilter::Family;
use istio_cni::xtables::legacy;
use istio_cni::xtables::rule::{Match, Table, TableOps, Target};
use istio_cni::xtables::{ops, spec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What another program adds to nat OUTPUT before our rules.
const FOREIGN: &str = "-A OUTPUT -m comment --comment x -j ACCEPT";

/// `*-legacy-save` per table, without comment lines and counters.
fn save_text(ns: &Netns, family: Family) -> BTreeMap<String, String> {
    let text = ns.saved_rules(&format!("{}-legacy-save", prefix(family)));
    let mut out = BTreeMap::new();
    for t in text
        .split_inclusive("COMMIT")
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let name = t
            .lines()
            .next()
            .unwrap()
            .trim_start_matches('*')
            .to_string();
        out.insert(name, t.to_string());
    }
    out
}

/// Each legacy table's hook entries, policies, entry count and entries as the kernel holds them, with
/// the fields the kernel fills in (counters, `comefrom`) zeroed.
type Blobs = BTreeMap<String, ([u32; 5], [u32; 5], u32, Vec<u8>)>;

fn blobs(ns: &Netns, family: Family) -> Blobs {
    istio_cni::netns::run_in(&ns.path(), move || {
        let l = legacy::entry::layout(family);
        let mut out = Blobs::new();
        for name in legacy::table_names(family)? {
            let (info, mut b) = legacy::read_raw(family, &name)?;
            let mut off = 0;
            while off + l.size <= b.len() {
                let next = u16::from_ne_bytes([
                    b[off + l.target_offset_at + 2],
                    b[off + l.target_offset_at + 3],
                ]);
                b[off + l.comefrom_at..off + l.comefrom_at + 4].fill(0);
                b[off + l.counters_at..off + l.counters_at + 16].fill(0);
                assert!(next > 0);
                off += usize::from(next);
            }
            out.insert(name, (info.hook_entry, info.underflow, info.num_entries, b));
        }
        Ok(out)
    })
    .unwrap()
}

fn our_restore(ns: &Netns, family: Family, doc: Vec<TableOps>) -> istio_cni::Result<()> {
    istio_cni::netns::run_in(&ns.path(), move || legacy::restore(family, &doc))
}

fn our_save(ns: &Netns, family: Family) -> BTreeMap<String, Table> {
    let tables = istio_cni::netns::run_in(&ns.path(), move || legacy::save(family)).unwrap();
    tables.into_iter().map(|t| (t.name.clone(), t)).collect()
}

fn has_other(t: &Table) -> bool {
    t.chains.iter().flat_map(|c| &c.rules).any(|r| {
        matches!(r.target, Target::Other(_))
            || r.matches.iter().any(|m| matches!(m, Match::Other(_)))
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_document_restored_by_us_is_what_the_tool_writes() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("xtleg");
    for (path, family) in documents() {
        let what = path.display().to_string();
        let text = read(&path);
        let doc = spec::parse_doc(family, &text, &names).unwrap();
        let (a, b) = (Netns::new("xtlega"), Netns::new("xtlegb"));
        our_restore(&a, family, doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
        node_restore_ok(&b, "legacy", family, &text, &tmp);
        let saved = save_text(&a, family);
        assert_eq!(saved, save_text(&b, family), "{what}: save text");
        let kernel = blobs(&a, family);
        assert_eq!(kernel, blobs(&b, family), "{what}: kernel blobs");
        let model = our_save(&a, family);
        assert_eq!(model, our_save(&b, family), "{what}: decoded models");
        assert!(!model.values().any(has_other), "{what}: {model:?}");
        // What we read renders as the tool's save prints it, table by table.
        for (name, t) in &model {
            let ours = without_counters(&spec::save_text(family, std::slice::from_ref(t)));
            assert_eq!(ours.trim(), saved[name], "{what}: our save of {name}");
        }
        // Our model of the document is what we read back.
        let desired = ops::desired(family, &doc).unwrap();
        for t in &desired {
            let got = &model[&t.name];
            let with_rules = |t: &Table| {
                t.chains
                    .iter()
                    .filter(|c| {
                        !c.rules.is_empty() || !spec::builtins(&t.name).contains(&c.name.as_str())
                    })
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert_eq!(with_rules(got), with_rules(t), "{what}: table {}", t.name);
        }
        // Again: the first `-N` fails, and nothing changes.
        let err = our_restore(&a, family, doc).unwrap_err().to_string();
        assert!(err.contains("already exists"), "{what}: {err}");
        assert!(
            !node_restore(&b, "legacy", family, &text, &tmp)
                .status
                .success(),
            "{what}"
        );
        assert_eq!(
            blobs(&a, family),
            kernel,
            "{what}: a failed restore changed the tables"
        );
        assert_eq!(save_text(&a, family), saved, "{what}");
    }
}

/// The converge document from what `from` left to `to`, as the iptables backend makes it.
fn converge(family: Family, to: &str, actual: &BTreeMap<String, String>) -> String {
    let actual = save::parse(&actual.values().cloned().collect::<Vec<_>>().join("\n"));
    let desired = ops::desired(family, &spec::parse_doc(family, to, &names).unwrap()).unwrap();
    let expected = save::parse(&spec::save_text(family, &desired));
    state::converge_document(to, &expected, &actual)
}

#[test]
fn converging_with_a_foreign_rule_in_place_matches_the_tool() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("xtlegc");
    let docs = documents();
    for family in [Family::V4, Family::V6] {
        let docs: Vec<&PathBuf> = docs
            .iter()
            .filter(|(_, f)| *f == family)
            .map(|(p, _)| p)
            .collect();
        // Each document converged to the next one (a different configuration: deletes, flushes,
        // chains removed and added, rules inserted in built-in chains).
        for pair in docs.windows(2) {
            let what = format!("{} -> {}", pair[0].display(), pair[1].display());
            let (from, to) = (read(pair[0]), read(pair[1]));
            let (a, b) = (Netns::new("xtlgca"), Netns::new("xtlgcb"));
            for ns in [&a, &b] {
                let mut argv = vec![
                    format!("{}-legacy", prefix(family)),
                    "-t".into(),
                    "nat".into(),
                ];
                argv.extend(FOREIGN.split(' ').map(String::from));
                ns.exec_ok(&argv);
            }
            our_restore(&a, family, spec::parse_doc(family, &from, &names).unwrap())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            node_restore_ok(&b, "legacy", family, &from, &tmp);
            let before = save_text(&b, family);
            assert_eq!(save_text(&a, family), before, "{what}: first restore");
            assert!(before["nat"].contains(FOREIGN), "{what}: {}", before["nat"]);
            let conv = converge(family, &to, &before);
            our_restore(&a, family, spec::parse_doc(family, &conv, &names).unwrap())
                .unwrap_or_else(|e| panic!("{what}: {e}\n{conv}"));
            node_restore_ok(&b, "legacy", family, &conv, &tmp);
            let after = save_text(&b, family);
            assert_eq!(save_text(&a, family), after, "{what}: converged\n{conv}");
            assert_eq!(blobs(&a, family), blobs(&b, family), "{what}: kernel blobs");
            assert!(
                after["nat"].contains(FOREIGN),
                "{what}: the foreign rule is gone"
            );
            let model = our_save(&a, family);
            assert_eq!(model, our_save(&b, family), "{what}");
            let foreign: Vec<_> = model["nat"]
                .chains
                .iter()
                .flat_map(|c| &c.rules)
                .filter(|r| r.matches.iter().any(|m| matches!(m, Match::Other(_))))
                .collect();
            assert_eq!(foreign.len(), 1, "{what}: {foreign:?}");
            assert_eq!(foreign[0].target, Target::Accept);
        }
    }
}

/// One UDP datagram from inside `ns` to a socket bound in it on lo: one packet through each hook.
fn one_datagram(ns: &Netns) {
    istio_cni::netns::run_in(&ns.path(), || {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 4];
        rx.recv(&mut buf).unwrap();
        Ok(())
    })
    .unwrap();
}

#[test]
fn counters_of_the_rules_kept_are_handed_back_as_the_tool_does() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("xtlegn");
    let text = read(&conformance_dir().join("pod/tproxy/expected.rules"));
    let (a, b) = (Netns::new("xtlgna"), Netns::new("xtlgnb"));
    for ns in [&a, &b] {
        let mut argv = vec!["iptables-legacy", "-t", "mangle"];
        argv.extend(FOREIGN.split(' '));
        ns.exec_ok(&argv);
        one_datagram(ns);
    }
    our_restore(
        &a,
        Family::V4,
        spec::parse_doc(Family::V4, &text, &names).unwrap(),
    )
    .unwrap();
    node_restore_ok(&b, "legacy", Family::V4, &text, &tmp);
    let counted = |ns: &Netns| {
        let out = ns.exec_ok(&["iptables-legacy-save", "-c", "-t", "mangle"]);
        out.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let got = counted(&a);
    // The foreign rule keeps its count; the policies the datagram went through start again at zero,
    // as with the tool.
    assert!(got.contains(&format!("[1:29] {FOREIGN}")), "{got}");
    assert!(got.contains(":INPUT ACCEPT [0:0]"), "{got}");
    assert_eq!(got, counted(&b));
}

#[test]
fn concurrent_restores_into_one_namespace_all_land() {
    if !require_root() {
        return;
    }
    // Writers that read the table before another one's replace get EAGAIN from the kernel and read
    // again: each of them lands, nothing is lost. Each EAGAIN is another writer landing, so fewer
    // writers than attempts always land, however the threads are scheduled.
    let n = istio_cni::xtables::sockopt::ATTEMPTS - 4;
    let ns = Netns::new("xtlgcc");
    let writers: Vec<_> = (0..n)
        .map(|i| {
            let path = ns.path();
            let doc = format!("* nat\n-N ISTIO_T{i}\n-A ISTIO_T{i} -p tcp --dport {} -j RETURN\n-A OUTPUT -j ISTIO_T{i}\nCOMMIT\n", 1000 + i);
            std::thread::spawn(move || {
                let ops = spec::parse_doc(Family::V4, &doc, &names).unwrap();
                istio_cni::netns::run_in(&path, move || legacy::restore(Family::V4, &ops))
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap().unwrap();
    }
    let nat = &save_text(&ns, Family::V4)["nat"];
    for i in 0..n {
        assert!(nat.contains(&format!("-A OUTPUT -j ISTIO_T{i}\n")), "{nat}");
        assert!(
            nat.contains(&format!(
                "-A ISTIO_T{i} -p tcp -m tcp --dport {} -j RETURN",
                1000 + i
            )),
            "{nat}"
        );
    }
}

#[test]
fn first_writers_of_a_fresh_namespace_race_without_error() {
    if !require_root() {
        return;
    }
    // The kernel makes a namespace's nat (or mangle) table on its first use, outside its lock: of callers
    // that use it first at the same moment, the losers' get-info answers EEXIST (the table exists by
    // then). A pod's plugin and the node's agent can meet so on a new pod: each must land. Several fresh
    // namespaces, four writers each released together by a barrier.
    const WRITERS: usize = 4;
    for round in 0..8 {
        let ns = Netns::new(&format!("xtlgf{round}"));
        let go = std::sync::Arc::new(std::sync::Barrier::new(WRITERS));
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (path, go) = (ns.path(), go.clone());
                let table = ["nat", "mangle"][round % 2];
                let doc = format!("* {table}\n-N ISTIO_F{i}\n-A OUTPUT -j ISTIO_F{i}\nCOMMIT\n");
                std::thread::spawn(move || {
                    let ops = spec::parse_doc(Family::V4, &doc, &names).unwrap();
                    istio_cni::netns::run_in(&path, move || {
                        go.wait();
                        legacy::restore(Family::V4, &ops)
                    })
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap().unwrap();
        }
        let table = &save_text(&ns, Family::V4)[["nat", "mangle"][round % 2]];
        for i in 0..WRITERS {
            assert!(
                table.contains(&format!("-A OUTPUT -j ISTIO_F{i}\n")),
                "{table}"
            );
        }
    }
}
