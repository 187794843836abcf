//! Values upstream refuses that a lenient reading would take as "exclude" or "nothing": blank lists, a spaced
//! wildcard, line breaks or NBSP padding (each fails the ADD, naming the annotation).

use super::tests::{error, pod, redirect};
use super::*;

#[test]
fn blank_interface_lists_fail_as_upstream() {
    for k in [
        EXCLUDE_INTERFACES,
        REROUTE_VIRTUAL_INTERFACES,
        KUBEVIRT_INTERFACES,
    ] {
        for v in [" ", "\t", " \t "] {
            let (key, value, reason) = error(&[(k, v)]);
            assert_eq!((key.as_str(), value.as_str()), (k, v));
            assert!(reason.contains("empty interface name"), "{reason}");
        }
        assert_eq!(redirect(&[(k, "")]), redirect(&[]));
    }
    let (key, _, _) = error(&[
        (REROUTE_VIRTUAL_INTERFACES, " "),
        (KUBEVIRT_INTERFACES, "net1"),
    ]);
    assert_eq!(key, REROUTE_VIRTUAL_INTERFACES);
}

// Upstream's wildcard is the exact value "*" (`validatePortListWithWildcard`); " * " is a port list that
// fails validation, whatever the include says.
#[test]
fn a_spaced_exclude_inbound_wildcard_fails_as_upstream() {
    for include in ["8080", "", "*"] {
        let (key, value, reason) = error(&[
            (INCLUDE_INBOUND_PORTS, include),
            (EXCLUDE_INBOUND_PORTS, " * "),
        ]);
        assert_eq!(
            (key.as_str(), value.as_str()),
            (EXCLUDE_INBOUND_PORTS, " * ")
        );
        assert!(reason.contains("wildcard"), "{reason}");
    }
}

// A blank include list is not "" (no capture): upstream validates it (the value is trimmed for validation)
// and then fails in iptables-restore on the untrimmed `--dport  `. Read as empty it would start the pod
// with no inbound capture (includeInboundPorts) or without the ports it names (includeOutboundPorts), so it
// is refused. A blank exclude list stays empty (it captures more, never less).
#[test]
fn a_blank_include_port_list_fails_closed() {
    for k in [INCLUDE_INBOUND_PORTS, INCLUDE_OUTBOUND_PORTS] {
        for v in [" ", " \t ", "\n", "\u{a0}"] {
            let (key, value, reason) = error(&[(k, v)]);
            assert_eq!((key.as_str(), value.as_str()), (k, v));
            assert!(reason.contains("blank"), "{reason}");
        }
        // "" is upstream's "none".
        let r = redirect(&[(k, "")]);
        assert!(r.include_outbound_ports.is_empty());
    }
    assert_eq!(
        redirect(&[(INCLUDE_INBOUND_PORTS, "")]).include_inbound_ports,
        Ports::List(vec![])
    );
    for k in [EXCLUDE_INBOUND_PORTS, EXCLUDE_OUTBOUND_PORTS] {
        assert!(Redirect::from_pod(&pod(&[(k, " \t ")])).is_ok(), "{k}");
    }
}

// Upstream validates list entries trimmed but renders them untrimmed into its rule lines: a line break splits
// the rule (ADD fails); any other whitespace stays in the token, failing a port (ADD fails) or naming an
// interface that does not exist (iptables: nothing is excluded). Only spaces and tabs, which iptables-restore
// and nft read as separators, may pad entries; the rest is refused, so an exclusion never applies where
// upstream fails or excludes nothing.
#[test]
fn only_spaces_and_tabs_may_pad_list_entries() {
    for (k, v) in [
        (EXCLUDE_OUTBOUND_PORTS, "8080\n"),
        (EXCLUDE_OUTBOUND_PORTS, "80,\n443"),
        (INCLUDE_OUTBOUND_PORTS, "80\r"),
        (INCLUDE_INBOUND_PORTS, "80\n"),
        (EXCLUDE_INBOUND_PORTS, "80,\n443"),
        (EXCLUDE_INBOUND_PORTS, "80,\u{a0}443"),
        (EXCLUDE_INTERFACES, "eth0\n"),
        (EXCLUDE_INTERFACES, "eth0\r"),
        (EXCLUDE_INTERFACES, "net1,\u{a0}eth0"),
        (REROUTE_VIRTUAL_INTERFACES, "net1\n"),
        (KUBEVIRT_INTERFACES, "net1\u{b}"),
    ] {
        let (key, value, reason) = error(&[(k, v)]);
        assert_eq!((key.as_str(), value.as_str()), (k, v));
        assert!(reason.contains("spaces and tabs"), "{k} {v:?}: {reason}");
    }
    // What upstream programs stays accepted: spaces and tabs, and excludeInboundPorts trimmed at its ends
    // (upstream trims it before appending 15020,15021,15090).
    let r = redirect(&[
        (EXCLUDE_INBOUND_PORTS, "\n3306,\t8080 \r\n"),
        (EXCLUDE_OUTBOUND_PORTS, "\t9000 ,9001"),
        (EXCLUDE_INTERFACES, " eth1 ,\teth2"),
    ]);
    assert_eq!(
        r.exclude_inbound_ports,
        vec![3306, 8080, 15020, 15021, 15090]
    );
    assert_eq!(r.exclude_outbound_ports, vec![9000, 9001]);
    assert_eq!(r.exclude_interfaces.len(), 2);
    // With an explicit inbound include upstream never renders the excludes, so it starts the pod: so do we.
    let r = redirect(&[
        (INCLUDE_INBOUND_PORTS, "8080"),
        (EXCLUDE_INBOUND_PORTS, "80,\n443"),
    ]);
    assert_eq!(r.include_inbound_ports, Ports::List(vec![8080]));
}
