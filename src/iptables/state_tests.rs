use super::*;
use crate::iptables::save::parse;

const WANT: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_INBOUND - [0:0]\n:ISTIO_OUTPUT - [0:0]\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_OUTPUT\n-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN\n-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN\nCOMMIT\n";

#[test]
fn identical_state_has_no_diff() {
    let e = parse(WANT);
    assert!(diff(&e, &e).is_empty());
}

#[test]
fn foreign_rules_in_builtin_chains_are_not_ours() {
    let e = parse(WANT);
    let a = parse(&WANT.replace(
        "-A OUTPUT -j ISTIO_OUTPUT\n",
        "-A OUTPUT -j ISTIO_OUTPUT\n-A OUTPUT -d 1.2.3.4/32 -j ACCEPT\n",
    ));
    assert!(diff(&e, &a).is_empty());
}

#[test]
fn tampering_is_listed() {
    let e = parse(WANT);
    let a = parse(&WANT.replace(
        "-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN\n",
        "-A ISTIO_OUTPUT -j ACCEPT\n",
    ));
    let d = diff(&e, &a);
    assert_eq!(
        d.missing,
        vec!["-t nat -A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN"]
    );
    assert_eq!(d.unexpected, vec!["-t nat -A ISTIO_OUTPUT -j ACCEPT"]);
    let gone = parse(&WANT.replace("-A PREROUTING -p tcp -j ISTIO_INBOUND\n", ""));
    assert_eq!(
        diff(&e, &gone).missing,
        vec!["-t nat -A PREROUTING -p tcp -j ISTIO_INBOUND"]
    );
}

#[test]
fn converge_deletes_flushes_and_recreates() {
    let e = parse(WANT);
    let a = parse("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT - [0:0]\n:ISTIO_OLD - [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\n-A OUTPUT -o eth9 -j RETURN\n-A OUTPUT -d 1.2.3.4/32 -j ACCEPT\n-A ISTIO_OUTPUT -j ISTIO_OLD\nCOMMIT\n");
    let doc = "* nat\n-N ISTIO_INBOUND\n-N ISTIO_OUTPUT\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n";
    assert_eq!(
        converge_document(doc, &e, &a),
        "* nat\n-D OUTPUT -j ISTIO_OUTPUT\n-D OUTPUT -o eth9 -j RETURN\n-F ISTIO_OLD\n-F ISTIO_OUTPUT\n-X ISTIO_OLD\n-N ISTIO_INBOUND\n-I OUTPUT 1 -j ISTIO_OUTPUT\n-I PREROUTING 1 -p tcp -j ISTIO_INBOUND\nCOMMIT\n"
    );
}

#[test]
fn converge_cleans_tables_no_longer_wanted() {
    let e = parse(WANT);
    let a = parse("*mangle\n:PREROUTING ACCEPT [0:0]\n:ISTIO_DROP - [0:0]\n-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP\n-A ISTIO_DROP -j DROP\nCOMMIT\n");
    let out = converge_document("* nat\n-N ISTIO_X\nCOMMIT\n", &e, &a);
    assert!(out.starts_with("* mangle\n-D PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP\n-F ISTIO_DROP\n-X ISTIO_DROP\nCOMMIT\n* nat\n"), "{out}");
}

#[test]
fn a_rule_before_our_jump_is_a_bypass_and_converge_goes_first_again() {
    let e = parse(WANT);
    let a = parse(&WANT.replace(
        "-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_OUTPUT\n",
        "-A PREROUTING -j ACCEPT\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -d 1.2.3.4/32 -j ACCEPT\n-A OUTPUT -j ISTIO_OUTPUT\n",
    ));
    let d = diff(&e, &a);
    assert!(d.missing.is_empty(), "{d:?}");
    assert_eq!(
        d.before,
        vec![
            "-t nat -A OUTPUT -d 1.2.3.4/32 -j ACCEPT (before our rules: it bypasses them)",
            "-t nat -A PREROUTING -j ACCEPT (before our rules: it bypasses them)"
        ]
    );
    let doc = "* nat\n-N ISTIO_INBOUND\n-N ISTIO_OUTPUT\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_OUTPUT\n-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN\n-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN\nCOMMIT\n";
    let out = converge_document(doc, &e, &a);
    assert!(
        out.ends_with(
            "-I OUTPUT 1 -j ISTIO_OUTPUT\n-I PREROUTING 1 -p tcp -j ISTIO_INBOUND\nCOMMIT\n"
        ),
        "{out}"
    );
    assert!(
        !out.contains("ACCEPT"),
        "foreign rules are left alone: {out}"
    );
    // A whole chain of ours missing (nothing of ours in OUTPUT): every foreign rule there bypasses.
    let a = parse(&WANT.replace("-A OUTPUT -j ISTIO_OUTPUT\n", "-A OUTPUT -j ACCEPT\n"));
    let d = diff(&e, &a);
    assert_eq!(d.missing, vec!["-t nat -A OUTPUT -j ISTIO_OUTPUT"]);
    assert_eq!(
        d.before,
        vec!["-t nat -A OUTPUT -j ACCEPT (before our rules: it bypasses them)"]
    );
}

/// A foreign rule between two of ours (after our interface RETURN, before our jump) bypasses the jump as
/// surely as one before both; one after our last rule does not. Converge puts ours on top again.
#[test]
fn a_rule_between_our_rules_is_a_bypass_and_converge_goes_first_again() {
    let want = WANT.replace(
        "-A OUTPUT -j ISTIO_OUTPUT\n",
        "-A OUTPUT -o eth9 -j RETURN\n-A OUTPUT -j ISTIO_OUTPUT\n",
    );
    let e = parse(&want);
    let a = parse(&want.replace(
        "-A OUTPUT -j ISTIO_OUTPUT\n",
        "-A OUTPUT -j ACCEPT\n-A OUTPUT -j ISTIO_OUTPUT\n-A OUTPUT -d 1.2.3.4/32 -j ACCEPT\n",
    ));
    let d = diff(&e, &a);
    assert!(d.missing.is_empty() && d.unexpected.is_empty(), "{d:?}");
    assert_eq!(
        d.before,
        vec!["-t nat -A OUTPUT -j ACCEPT (before our rules: it bypasses them)"]
    );
    let doc = "* nat\n-N ISTIO_INBOUND\n-N ISTIO_OUTPUT\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -o eth9 -j RETURN\n-A OUTPUT -j ISTIO_OUTPUT\n-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN\n-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN\nCOMMIT\n";
    let out = converge_document(doc, &e, &a);
    assert!(
        out.starts_with("* nat\n-D OUTPUT -o eth9 -j RETURN\n-D OUTPUT -j ISTIO_OUTPUT\n"),
        "{out}"
    );
    assert!(
        out.ends_with("-I OUTPUT 1 -o eth9 -j RETURN\n-I OUTPUT 2 -j ISTIO_OUTPUT\n-I PREROUTING 1 -p tcp -j ISTIO_INBOUND\nCOMMIT\n"),
        "{out}"
    );
}
