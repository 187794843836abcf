//! The continuous audit, end to end (root): pods wired by Debian's `ptp` + `host-local` and redirected by our
//! plugin's ADD, a pause process in each, in its pod cgroup (the audit finds each namespace from /proc by
//! IP + cgroup, as repair in place does), the pods in the HTTPS API double, the standalone agent with a
//! short `AUDIT_INTERVAL`. Then the rules are taken away (flushed: `missing`, repaired in place, counted,
//! `redirected` again) or walked past (raw notrack, a foreign nat chain jumped to before ours, the other x_tables
//! backend: `bypassed`, the rule named, an Event, the rule left alone), in iptables and native nftables
//! mode; delete mode deletes a bypassed pod; a pod that is fine is never written to (no API write, its
//! ruleset's handles unchanged round after round); the operators' one-shot prints the same verdicts.
//! No timing is asserted: every wait is for a condition, with a generous bound.

use crate::support::audit::*;
use crate::support::e2e::*;
use crate::support::repair::{metric, scrape, wait_until, Agent, Pause, PodCgroup};
use crate::support::*;
use istio_cni::json;
use std::process::Command;

#[test]
fn audit_iptables_a_flushed_pod_is_missing_then_repaired_and_a_fine_pod_is_never_written() {
    if !require_root() {
        return;
    }
    let node = Node::new(81);
    node.record_backend("nft");
    let fine = Audited::new(&node, "fine", false);
    let victim = Audited::new(&node, "victim", false);
    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "both pods redirected in a round", |m| {
        pods_in(m, "redirected") == Some(2.0) && pods_in(m, "missing") == Some(0.0)
    });

    // Round after round, nothing is written: no API write, no rule rewritten (handles unchanged).
    let fine_rules = fine.ruleset();
    assert!(fine_rules.contains("ISTIO_OUTPUT"), "{fine_rules}");
    let r0 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "three more rounds", |m| rounds(m) >= r0 + 3.0);
    assert_eq!(
        fine.ruleset(),
        fine_rules,
        "the audit rewrote a fine pod's rules"
    );
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
    assert!(node.srv.events().is_empty(), "{:?}", node.srv.events());

    // Flushed: found missing, repaired in place, counted, redirected again with exactly ADD's rules.
    victim.sh("iptables-nft -t nat -F");
    wait_log(&agent, "audit: pod default/victim is missing: ");
    wait_metrics(&agent, "the repair counted", |m| {
        metric(m, "repair", "success") == 1
    });
    wait_log(&agent, "audit: pod default/victim is redirected");
    wait_metrics(&agent, "both pods redirected again", |m| {
        pods_in(m, "redirected") == Some(2.0)
    });
    assert_eq!(
        victim.pod.save("iptables-nft-save"),
        fine.pod.save("iptables-nft-save"),
        "the repaired pod's rules vs ADD's"
    );
    let ev = events(&node, "victim", "RedirectMissing");
    assert_eq!(ev.len(), 1, "{:?}", node.srv.events());
    assert!(
        json::str_of(&ev[0], "message").is_some_and(|m| m.contains("missing")),
        "{ev:?}"
    );
    assert!(events(&node, "fine", "RedirectMissing").is_empty());
    assert_eq!(
        fine.ruleset(),
        fine_rules,
        "the audit rewrote a fine pod's rules"
    );
    assert!(
        pod_writes(&node).is_empty(),
        "repair in place writes no pod: {:?}",
        pod_writes(&node)
    );
    let log = agent.log();
    assert_eq!(
        log.matches("audit: pod default/victim is missing").count(),
        1,
        "{log}"
    );
}

#[test]
fn audit_iptables_bypasses_are_named_with_an_event_left_alone_and_the_one_shot_reports_them() {
    if !require_root() {
        return;
    }
    let node = Node::new(82);
    node.record_backend("nft");
    let dst = format!("10.252.{}.1", node.idx());
    let notrack = Audited::new(&node, "notrack", false);
    notrack.sh("iptables-nft -t raw -A OUTPUT -j CT --notrack");
    let natfirst = Audited::new(&node, "natfirst", false);
    natfirst.sh(&format!(
        "iptables-nft -t nat -N SNEAKY && iptables-nft -t nat -A SNEAKY -p tcp --dport 9090 -j DNAT \
         --to-destination {dst}:9090 && iptables-nft -t nat -I OUTPUT 1 -j SNEAKY"
    ));
    let legacy = Audited::new(&node, "legacy", false);
    legacy.sh("iptables-legacy -t raw -A OUTPUT -j CT --notrack");
    let _ok = Audited::new(&node, "ok", false);

    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "three bypassed, one redirected", |m| {
        pods_in(m, "bypassed") == Some(3.0) && pods_in(m, "redirected") == Some(1.0)
    });
    let named = [
        (
            "notrack",
            "iptables-nft (IPv4) -t raw OUTPUT rule 1: -j CT --notrack",
        ),
        (
            "natfirst",
            "IPv4: unexpected -t nat -A OUTPUT -j SNEAKY (before our rules: it bypasses them)",
        ),
        (
            "legacy",
            "legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT",
        ),
    ];
    for (pod, rule) in named {
        wait_log(&agent, &format!("audit: pod default/{pod} is bypassed: "));
        let line = agent
            .log()
            .lines()
            .find(|l| l.contains(&format!("audit: pod default/{pod} is bypassed")))
            .unwrap_or_default()
            .to_string();
        assert!(line.contains(rule), "{pod}: {rule:?} not named in {line}");
        let ok = wait_until(BOUND, || events(&node, pod, "RedirectBypassed").len() == 1);
        assert!(
            ok,
            "{pod}: no RedirectBypassed event: {:?}",
            node.srv.events()
        );
        let ev = events(&node, pod, "RedirectBypassed");
        assert!(
            json::str_of(&ev[0], "message").is_some_and(|m| m.contains(rule)),
            "{pod}: {ev:?}"
        );
    }
    // Repair in place never "fixes" a bypass: nothing repaired or tried, every foreign rule still there.
    let m = scrape(agent.port);
    assert_eq!(
        metric(&m, "repair", "success") + metric(&m, "repair", "fail"),
        0,
        "{m}"
    );
    assert!(notrack
        .pod
        .save("iptables-nft-save")
        .contains("-j CT --notrack"));
    assert!(legacy
        .pod
        .save("iptables-legacy-save")
        .contains("-j CT --notrack"));
    assert!(natfirst
        .pod
        .save("iptables-nft-save")
        .contains("-A OUTPUT -j SNEAKY"));
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));

    // The one-shot: the same verdicts, one line per pod, exit 1; JSON alike.
    let sa = node.dir.join("sa");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), node.srv.token()).unwrap();
    std::fs::write(sa.join("ca.crt"), node.srv.ca_pem()).unwrap();
    let out = one_shot(&node, &sa, &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{show}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{show}");
    assert!(
        lines[0].starts_with("default/legacy bypassed ") && lines[0].contains(named[2].1),
        "{show}"
    );
    assert!(
        lines[1].starts_with("default/natfirst bypassed ") && lines[1].contains(named[1].1),
        "{show}"
    );
    assert!(
        lines[2].starts_with("default/notrack bypassed ") && lines[2].contains(named[0].1),
        "{show}"
    );
    assert_eq!(lines[3], "default/ok redirected", "{show}");
    let out = one_shot(&node, &sa, &["--json"], false);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 4, "{v}");
    assert_eq!(items[0]["pod"], "default/legacy");
    assert_eq!(items[0]["verdict"], "bypassed");
    assert!(
        items[0]["detail"].as_str().unwrap().contains(named[2].1),
        "{v}"
    );
    assert_eq!(items[3]["verdict"], "redirected");
    // Bypasses removed: every pod redirected, exit 0.
    notrack.sh("iptables-nft -t raw -F OUTPUT");
    legacy.sh("iptables-legacy -t raw -F OUTPUT");
    natfirst.sh("iptables-nft -t nat -D OUTPUT -j SNEAKY");
    let out = one_shot(&node, &sa, &[], false);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "default/legacy redirected\ndefault/natfirst redirected\ndefault/notrack redirected\ndefault/ok redirected\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn audit_delete_mode_deletes_a_bypassed_pod_through_the_api() {
    if !require_root() {
        return;
    }
    let node = Node::new(83);
    node.record_backend("nft");
    let p = Audited::new(&node, "doomed", false);
    p.sh("iptables-nft -t raw -A PREROUTING -j CT --notrack");
    let agent = Agent::start(
        &node,
        &[
            "--audit-interval=1s",
            "--repair-repair-pods=false",
            "--repair-delete-pods=true",
        ],
        &[],
    );
    wait_metrics(&agent, "the delete counted", |m| {
        metric(m, "delete", "success") == 1
    });
    let deletes: Vec<_> = node
        .srv
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].path, "/api/v1/namespaces/default/pods/doomed");
    assert!(
        deletes[0].body.contains(&p.pod.uid),
        "uid precondition: {}",
        deletes[0].body
    );
    assert_eq!(events(&node, "doomed", "RedirectBypassed").len(), 1);
    assert!(
        p.pod.save("iptables-nft-save").contains("CT --notrack"),
        "the rule is left alone"
    );
}

#[test]
fn audit_nftables_a_flushed_pod_is_repaired_and_a_raw_notrack_is_named() {
    if !require_root() {
        return;
    }
    let node = Node::new(84);
    let fine = Audited::new(&node, "fine", true);
    let victim = Audited::new(&node, "victim", true);
    let notrack = Audited::new(&node, "notrack", true);
    notrack.sh(
        "nft add table ip rawish && nft 'add chain ip rawish out { type filter hook output priority -300 ; }' \
         && nft add rule ip rawish out notrack",
    );
    let agent = Agent::start(
        &node,
        &["--audit-interval=1s"],
        &[("NATIVE_NFTABLES", "true")],
    );
    wait_metrics(&agent, "two redirected, one bypassed", |m| {
        pods_in(m, "redirected") == Some(2.0) && pods_in(m, "bypassed") == Some(1.0)
    });
    wait_log(&agent, "audit: pod default/notrack is bypassed: ");
    assert!(
        agent
            .log()
            .contains("foreign chain ip rawish out (hook output, priority -300"),
        "{}",
        agent.log()
    );
    assert_eq!(
        events(&node, "notrack", "RedirectBypassed").len(),
        1,
        "{:?}",
        node.srv.events()
    );
    let fine_rules = fine.ruleset();
    let r0 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "two more rounds", |m| rounds(m) >= r0 + 2.0);
    assert_eq!(
        fine.ruleset(),
        fine_rules,
        "the audit rewrote a fine pod's tables"
    );

    victim.sh("nft flush table inet istio-proxy-nat");
    wait_log(&agent, "audit: pod default/victim is missing: ");
    wait_metrics(&agent, "the repair counted", |m| {
        metric(m, "repair", "success") == 1
    });
    wait_log(&agent, "audit: pod default/victim is redirected");
    assert_eq!(events(&node, "victim", "RedirectMissing").len(), 1);
    let strip = |s: String| -> String {
        s.lines()
            .filter(|l| !l.contains("rawish"))
            .map(|l| l.split(" # handle").next().unwrap_or(l).to_string() + "\n")
            .collect()
    };
    assert_eq!(
        strip(victim.ruleset()),
        strip(fine.ruleset()),
        "the repaired tables vs ADD's"
    );
    assert!(
        notrack.ruleset().contains("notrack"),
        "the foreign rule is left alone"
    );
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
}

#[test]
fn audit_a_decoy_namespace_with_the_pod_ip_leaves_a_kind_pod_missing_not_unverifiable() {
    if !require_root() {
        return;
    }
    let node = Node::new(87);
    node.record_backend("nft");
    let pod = node.pod("kindpod", "", "", false);
    pod.add().assert_success();
    // kind's cgroup layout; beside the pod, a namespace any user can make (`unshare -Urn`) holding its IP.
    let cgroup = PodCgroup::kind(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());
    let ip = pod.ip4.to_string();
    let script = format!("ip link set lo up && ip addr add {ip}/32 dev lo && exec sleep 3600");
    let mut decoy = Command::new("unshare")
        .args(["-Urn", "sh", "-c", &script])
        .spawn()
        .unwrap();
    assert!(
        wait_until(30, || std::fs::read_to_string(format!(
            "/proc/{}/comm",
            decoy.id()
        ))
        .is_ok_and(|c| c.trim() == "sleep")),
        "the decoy never started"
    );
    pod.ns.exec_ok(&["iptables-nft", "-t", "nat", "-F"]);
    let sa = node.dir.join("sa");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), node.srv.token()).unwrap();
    std::fs::write(sa.join("ca.crt"), node.srv.ca_pem()).unwrap();
    let out = one_shot(&node, &sa, &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert!(text.starts_with("default/kindpod missing"), "{show}");
    assert_eq!(out.status.code(), Some(1), "{show}");
}
