//! Legacy x_tables read as the kernel runs them, not as libiptc lays them out (root, real traffic). The
//! kernel runs a hook from the table's `hook_entry` offset, whatever entry headers say: a table handed over
//! with `IPT_SO_SET_REPLACE` by any program with `NET_ADMIN` in the pod can start raw `OUTPUT` at the
//! first rule of a chain that an `ERROR` header names `FOO`. The rules there run at that hook all the same.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use nix::libc;

/// In `pod`'s namespace: legacy raw with a user chain `FOO` holding `-p tcp -j CT --notrack`, jumped to
/// from nowhere; then the same table handed back to the kernel with raw `OUTPUT`'s hook entry moved to
/// `FOO`'s first rule (its policy, the underflow, stays where it was: `FOO`'s `RETURN` tail ends there).
fn hook_raw_output_at_a_user_chain(pod: &Pod) {
    for args in [
        &["-t", "raw", "-N", "FOO"][..],
        &[
            "-t",
            "raw",
            "-A",
            "FOO",
            "-p",
            "tcp",
            "-j",
            "CT",
            "--notrack",
        ][..],
    ] {
        let mut a = vec!["iptables-legacy"];
        a.extend(args);
        pod.ns.exec_ok(&a);
    }
    istio_cni::netns::run_in(&pod.ns.path(), || {
        let (info, blob) = istio_cni::xtables::sockopt::read(false, "raw")?;
        // struct ipt_entry (IPv4): target_offset at 88, next_offset at 90; targets' names at +2, data at +32.
        let u16_at = |o: usize| usize::from(u16::from_ne_bytes([blob[o], blob[o + 1]]));
        let mut off = 0;
        let mut user_chain = None;
        while off < blob.len() {
            let (toff, next) = (u16_at(off + 88), u16_at(off + 90));
            let t = off + toff;
            if blob[t + 2..t + 8] == *b"ERROR\0" && blob[t + 32..t + 36] == *b"FOO\0" {
                user_chain = Some(off + next);
            }
            off += next;
        }
        let first_rule = user_chain.expect("chain FOO in legacy raw") as u32;
        let mut hook_entry = info.hook_entry;
        hook_entry[3] = first_rule; // NF_INET_LOCAL_OUT
        let mut counters = vec![0u8; info.num_entries as usize * 16];
        let mut b = Vec::new();
        let mut name = [0u8; 32];
        name[..3].copy_from_slice(b"raw");
        b.extend(name);
        b.extend(info.valid_hooks.to_ne_bytes());
        b.extend(info.num_entries.to_ne_bytes());
        b.extend((blob.len() as u32).to_ne_bytes());
        hook_entry.iter().for_each(|h| b.extend(h.to_ne_bytes()));
        info.underflow
            .iter()
            .for_each(|h| b.extend(h.to_ne_bytes()));
        b.extend(info.num_entries.to_ne_bytes());
        b.extend((counters.as_mut_ptr() as u64).to_ne_bytes());
        b.extend(&blob);
        // SAFETY: a raw socket we own; `b` and `counters` (whose address `b` holds) outlive the call.
        let rc = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
            assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
            let rc = libc::setsockopt(fd, libc::IPPROTO_IP, 64, b.as_ptr().cast(), b.len() as u32);
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            (rc, e)
        };
        assert_eq!(rc.0, 0, "IPT_SO_SET_REPLACE: {}", rc.1);
        Ok(())
    })
    .unwrap();
}

/// With raw `OUTPUT` hooked at chain `FOO`'s `CT --notrack`, the app's outbound connection is untracked,
/// so no nat chain (ours included) sees it: it reaches the node past the proxy (the premise). CHECK and
/// re-ADD, which read the other x_tables backend's tables, must name the rule.
#[test]
fn a_legacy_hook_entry_at_a_user_chain_is_read_as_the_hook() {
    if !require_root() {
        return;
    }
    for (idx, b, record) in [
        (114, Backend::Nftables, None),
        (115, Backend::Iptables, Some("nft")),
    ] {
        let node = Node::new(idx);
        if let Some(r) = record {
            node.record_backend(r);
        }
        let pod = b.pod(&node, "hook-at-user", "", "", false);
        pod.add().assert_success();
        assert!(outbound_captured(&node, &pod), "{idx}: captured before");
        hook_raw_output_at_a_user_chain(&pod);
        assert!(
            !outbound_captured(&node, &pod),
            "{idx}: the app's connection should reach the node past the proxy (the test's premise)"
        );
        let want = "legacy iptables (IPv4) -t raw OUTPUT rule 1";
        let msg = pod.run("CHECK").assert_cni_error(103);
        assert!(
            msg.contains(want),
            "{idx}: CHECK does not name {want:?}: {msg}"
        );
        let msg = pod.add().assert_cni_error(103);
        assert!(
            msg.contains(want),
            "{idx}: re-ADD does not name {want:?}: {msg}"
        );
    }
    // Legacy is our own backend here: its reader, which lays the table out as the node's tool does,
    // refuses a table whose entries fall outside every chain (fail closed).
    let node = Node::new(116);
    node.record_backend("legacy");
    let pod = node.pod("hook-at-user", "", "", false);
    pod.add().assert_success();
    hook_raw_output_at_a_user_chain(&pod);
    assert!(!outbound_captured(&node, &pod), "legacy: the premise");
    let want = "legacy iptables (IPv4) table raw";
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(
        msg.contains(want),
        "legacy: CHECK does not name {want:?}: {msg}"
    );
    let msg = pod.add().assert_cni_error(103);
    assert!(
        msg.contains(want),
        "legacy: re-ADD does not name {want:?}: {msg}"
    );
}

/// iptables-nft's own security table (its base chains at priority 150, as iptables-nft 1.8.9 makes them)
/// with a rule that only accepts: nothing iptables-nft would not have made, nothing that moves traffic, so
/// CHECK passes and a re-ADD finds our rules in place (it named the chain "not as iptables-nft hooks it").
#[test]
fn iptables_nft_security_table_is_its_own() {
    if !require_root() {
        return;
    }
    let node = Node::new(119);
    node.record_backend("nft");
    let pod = node.pod("security", "", "", false);
    pod.add().assert_success();
    for chain in ["INPUT", "OUTPUT", "FORWARD"] {
        pod.ns.exec_ok(&[
            "iptables-nft",
            "-t",
            "security",
            "-A",
            chain,
            "-p",
            "tcp",
            "--dport",
            "1",
            "-j",
            "ACCEPT",
        ]);
    }
    assert!(outbound_captured(&node, &pod));
    pod.run("CHECK").assert_success();
    assert_re_add(&pod, "AlreadyInPlace");
}
