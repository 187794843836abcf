use super::*;

/// An entry: zeroed `ipt_entry`, matches (40 bytes each), then the target with `data`.
fn entry(l: Layout, matches: &[&str], target: &str, data: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; l.entry_size];
    for m in matches {
        let mut x = vec![0u8; 40];
        x[..2].copy_from_slice(&40u16.to_ne_bytes());
        x[2..2 + m.len()].copy_from_slice(m.as_bytes());
        e.extend(x);
    }
    let toff = e.len();
    let tsize = (EXT_HEADER + data.len() + 7) & !7;
    let mut t = vec![0u8; tsize];
    t[..2].copy_from_slice(&(tsize as u16).to_ne_bytes());
    t[2..2 + target.len()].copy_from_slice(target.as_bytes());
    t[EXT_HEADER..EXT_HEADER + data.len()].copy_from_slice(data);
    e.extend(t);
    let next = e.len();
    e[l.target_offset_at..l.target_offset_at + 2].copy_from_slice(&(toff as u16).to_ne_bytes());
    e[l.target_offset_at + 2..l.target_offset_at + 4].copy_from_slice(&(next as u16).to_ne_bytes());
    e
}

fn verdict(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

fn error(name: &str) -> Vec<u8> {
    let mut d = vec![0u8; 32];
    d[..name.len()].copy_from_slice(name.as_bytes());
    d
}

/// raw: PREROUTING (jump MINE; no target; policy), OUTPUT (CT; policy), MINE (tcp ACCEPT; RETURN tail).
fn table(l: Layout) -> (Info, Vec<u8>) {
    let sizes = |parts: &[Vec<u8>]| parts.iter().map(Vec::len).collect::<Vec<_>>();
    // Lay out once to learn the offsets, then fill in the jumps.
    let build = |mine: i32, fall: i32| {
        vec![
            entry(l, &[], "", &verdict(mine)),
            entry(l, &[], "", &verdict(fall)),
            entry(l, &[], "", &verdict(-2)),
            entry(l, &[], "CT", &[0u8; 8]),
            entry(l, &[], "", &verdict(-2)),
            entry(l, &[], "ERROR", &error("MINE")),
            entry(l, &["tcp"], "", &verdict(-2)),
            entry(l, &[], "", &verdict(-5)),
            entry(l, &[], "ERROR", &error("ERROR")),
        ]
    };
    let s = sizes(&build(0, 0));
    let off = |i: usize| s[..i].iter().sum::<usize>();
    let parts = build(off(6) as i32, off(2) as i32);
    let mut info = Info {
        valid_hooks: (1 << 0) | (1 << 3),
        hook_entry: [0; 5],
        underflow: [0; 5],
        num_entries: parts.len() as u32,
        size: 0,
    };
    info.hook_entry[3] = off(3) as u32;
    info.underflow[0] = off(2) as u32;
    info.underflow[3] = off(4) as u32;
    let blob: Vec<u8> = parts.concat();
    info.size = blob.len() as u32;
    (info, blob)
}

#[test]
fn chains_rules_targets_and_jumps_in_both_layouts() {
    for l in [IPV4, IPV6] {
        let (info, blob) = table(l);
        let c = chains(l, &info, &blob).unwrap();
        let targets =
            |name: &str| -> Vec<Target> { c[name].iter().map(|r| r.target.clone()).collect() };
        assert_eq!(
            targets("PREROUTING"),
            vec![Target::Jump("MINE".into()), Target::Fall]
        );
        assert_eq!(targets("OUTPUT"), vec![Target::Ext("CT".into())]);
        assert_eq!(targets("MINE"), vec![Target::Accept]);
        assert_eq!(c["MINE"][0].text, "target ACCEPT (matches tcp)");
        let found = crate::xtables::table_findings(
            "legacy iptables",
            crate::netfilter::Family::V4,
            "raw",
            &c,
        );
        assert_eq!(
            found,
            vec!["legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT"]
        );
    }
}

#[test]
fn info_reads_the_getinfo_layout() {
    let mut b = vec![0u8; INFO_LEN];
    b[..3].copy_from_slice(b"nat");
    b[32..36].copy_from_slice(&0b11011u32.to_ne_bytes());
    b[36 + 12..36 + 16].copy_from_slice(&1234u32.to_ne_bytes());
    b[56 + 12..56 + 16].copy_from_slice(&1386u32.to_ne_bytes());
    b[76..80].copy_from_slice(&9u32.to_ne_bytes());
    b[80..84].copy_from_slice(&4096u32.to_ne_bytes());
    let i = info(&b).unwrap();
    assert_eq!(
        (
            i.valid_hooks,
            i.hook_entry[3],
            i.underflow[3],
            i.num_entries,
            i.size
        ),
        (0b11011, 1234, 1386, 9, 4096)
    );
    assert!(info(&b[..80]).is_err());
}

/// Malformed tables are errors, never panics: every truncation and single-byte corruption.
#[test]
fn malformed_input_is_an_error_not_a_panic() {
    for l in [IPV4, IPV6] {
        let (info, blob) = table(l);
        for n in 0..blob.len() {
            let _ = chains(l, &info, &blob[..n]);
        }
        for i in 0..blob.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut m = blob.clone();
                m[i] = v;
                let _ = chains(l, &info, &m);
            }
        }
        // An entry point inside an entry: no chain starts there, the rules land in the previous chain.
        let mut odd = info.clone();
        odd.hook_entry[3] = 7;
        let c = chains(l, &odd, &blob).unwrap();
        assert!(!c.contains_key("OUTPUT"));
    }
}

/// Fail closed, as for nf_tables chains: a hooked chain that jumps to a chain whose rules were not read
/// is a finding (the walk cannot know that chain harmless), and a hooked chain the table does not have
/// runs nothing.
#[test]
fn a_jump_to_an_unread_chain_is_a_finding() {
    let rule = |target| Rule {
        text: "r".into(),
        target,
    };
    let mut c = Chains::new();
    c.insert(
        "OUTPUT".into(),
        vec![rule(Target::Accept), rule(Target::Jump("GONE".into()))],
    );
    assert_eq!(
        crate::xtables::table_findings("legacy iptables", crate::netfilter::Family::V4, "raw", &c),
        vec!["legacy iptables (IPv4) -t raw OUTPUT rule 0 (via chain GONE): the chain could not be read"]
    );
}

/// The kernel runs a hook from its entry point whatever the headers say: raw `OUTPUT` hooked at the first
/// rule of the chain an `ERROR` header names `MINE` runs `MINE`'s rules (a table any program with
/// `NET_ADMIN` can hand over; root test `a_legacy_hook_entry_at_a_user_chain_is_read_as_the_hook`), and a
/// hook entered in the middle of another chain's rules leaves that chain falling through into them.
#[test]
fn hooks_are_read_from_their_entry_points_not_from_the_headers() {
    for l in [IPV4, IPV6] {
        let (info, blob) = table(l);
        let entry_start = |n: usize| {
            let mut off = 0;
            for _ in 0..n {
                off += usize::from(u16::from_ne_bytes([
                    blob[off + l.target_offset_at + 2],
                    blob[off + l.target_offset_at + 3],
                ]));
            }
            off as u32
        };
        // OUTPUT hooked at MINE's first rule (its policy stays where it was).
        let mut at_mine = info.clone();
        at_mine.hook_entry[3] = entry_start(6);
        let c = chains(l, &at_mine, &blob).unwrap();
        assert_eq!(c["OUTPUT"], c["MINE"]);
        assert_eq!(c["OUTPUT"][0].target, Target::Accept);
        // OUTPUT hooked at PREROUTING's second rule: PREROUTING's first runs, then on into OUTPUT's.
        let mut mid = info.clone();
        mid.hook_entry[3] = entry_start(1);
        let c = chains(l, &mid, &blob).unwrap();
        assert_eq!(
            c["PREROUTING"]
                .iter()
                .map(|r| r.target.clone())
                .collect::<Vec<_>>(),
            vec![Target::Jump("MINE".into()), Target::Jump("OUTPUT".into())]
        );
        // Two hooks at one entry point: both run its rules (old iptables never does this; the kernel
        // takes it), and what a rule there does is found from either.
        let mut shared = info.clone();
        shared.hook_entry[3] = 0;
        let c = chains(l, &shared, &blob).unwrap();
        assert_eq!(c["OUTPUT"], c["PREROUTING"]);
        let found = crate::xtables::table_findings(
            "legacy iptables",
            crate::netfilter::Family::V4,
            "raw",
            &c,
        );
        assert_eq!(found.len(), 2, "{found:?}");
    }
}
