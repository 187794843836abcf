use super::*;
use crate::nftables::conntrack::{Tuple, AF_INET};
use crate::redirect::pod::ProxyContainer;
use crate::redirect::PodInfo;

fn redirect(annotations: &[(&str, &str)]) -> Redirect {
    let mut p = PodInfo {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec!["app".into(), "istio-proxy".into()],
        proxy: Some(ProxyContainer::default()),
        ..PodInfo::default()
    };
    p.annotations
        .insert("sidecar.istio.io/status".into(), "{}".into());
    for (k, v) in annotations {
        p.annotations.insert(k.to_string(), v.to_string());
    }
    Redirect::from_pod(&p).unwrap()
}

/// The pod's own addresses.
const LOCAL: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
];

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A TCP entry `src -> dst` whose reply comes from `reply_src`.
fn entry(src: &str, dst: &str, reply_src: &str) -> Entry {
    Entry {
        family: AF_INET,
        orig: Tuple {
            proto: IPPROTO_TCP,
            src: a(src),
            dst: a(dst),
        },
        reply: Tuple {
            proto: IPPROTO_TCP,
            src: a(reply_src),
            dst: a(src),
        },
        id: Some(1),
        zone: None,
    }
}

fn sock(local: &str, remote: &str, uid: u32) -> Sock {
    Sock {
        local: a(local),
        remote: a(remote),
        uid,
    }
}

#[test]
fn proc_net_tcp_gives_connected_sockets_with_their_owner() {
    // Layout and byte order as the kernel prints them (little-endian host).
    let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:3A99 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 1 1 0 100 0 0 10 0\n\
   1: 0200000A:9C40 0909090A:0050 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 20 4 30 10 -1\n\
   2: garbage\n";
    let s = sockets(v4);
    if cfg!(target_endian = "little") {
        assert_eq!(s, [sock("10.0.0.2:40000", "10.9.9.9:80", 1000)]);
    }
    let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0000000000000000FFFF00000200000A:9C40 0000000000000000FFFF00000909090A:0050 01 00000000:00000000 00:00000000 00000000  1337        0 3 1 0 20 4 30 10 -1\n";
    if cfg!(target_endian = "little") {
        // A v4-mapped address is the IPv4 one, as conntrack shows it.
        assert_eq!(sockets(v6), [sock("10.0.0.2:40000", "10.9.9.9:80", 1337)]);
    }
    assert!(sockets("").is_empty());
}

#[test]
fn an_application_connection_the_rules_now_capture_is_ended_and_nothing_else() {
    let r = redirect(&[]);
    let app = [sock("10.0.0.2:40000", "10.9.9.9:80", 1000)];
    // Opened while the rules were missing: its reply comes from the server itself.
    let gap = entry("10.0.0.2:40000", "10.9.9.9:80", "10.9.9.9:80");
    assert_eq!(fate(&gap, &app, &LOCAL, &r), Fate::End);
    // The same connection redirected: its reply comes from the proxy's port.
    let through = entry("10.0.0.2:40000", "10.9.9.9:80", "127.0.0.1:15001");
    assert_eq!(fate(&through, &app, &LOCAL, &r), Fate::Keep);
    // The proxy's own connection upstream (uid 1337, never redirected).
    let proxy = [sock("10.0.0.2:40000", "10.9.9.9:80", 1337)];
    assert_eq!(fate(&gap, &proxy, &LOCAL, &r), Fate::Keep);
    // No socket of the pod holds it (closed, TIME_WAIT): nothing to end.
    assert_eq!(fate(&gap, &[], &LOCAL, &r), Fate::Keep);
    // Both ends in the pod, loopback, to a proxy port: never redirected or already the proxy's.
    let both = [
        sock("10.0.0.2:40000", "10.0.0.2:8080", 1000),
        sock("10.0.0.2:8080", "10.0.0.2:40000", 1000),
    ];
    let own = entry("10.0.0.2:40000", "10.0.0.2:8080", "10.0.0.2:8080");
    assert_eq!(fate(&own, &both, &LOCAL, &r), Fate::Keep);
    // To itself even when only one end's socket was read.
    assert_eq!(fate(&own, &both[..1], &LOCAL, &r), Fate::Keep);
    assert_eq!(fate(&own, &both[..1], &[], &r), Fate::End);
    // An application's own socket to where its connection goes: kept.
    let kept = |src: &str, dst: &str, reply_src: &str| {
        let e = entry(src, dst, reply_src);
        fate(&e, &[sock(src, dst, 1000)], &LOCAL, &r)
    };
    assert_eq!(
        kept("127.0.0.1:40000", "127.0.0.1:80", "127.0.0.1:80"),
        Fate::Keep
    );
    assert_eq!(
        kept("10.0.0.2:40000", "10.9.9.9:15008", "10.9.9.9:15008"),
        Fate::Keep
    );
    // DNS over TCP captured to the proxy's DNS port.
    assert_eq!(
        kept("10.0.0.2:40001", "10.96.0.10:53", "127.0.0.1:15053"),
        Fate::Keep
    );
    // UDP is left alone.
    let mut udp = gap.clone();
    udp.orig.proto = 17;
    assert_eq!(fate(&udp, &app, &LOCAL, &r), Fate::Keep);
}

#[test]
fn exclusions_keep_a_connection_and_what_cannot_be_judged_is_unsure() {
    let gap = entry("10.0.0.2:40000", "10.9.9.9:80", "10.9.9.9:80");
    let app = [sock("10.0.0.2:40000", "10.9.9.9:80", 1000)];
    let keep = |ann: &[(&str, &str)]| fate(&gap, &app, &LOCAL, &redirect(ann));
    assert_eq!(
        keep(&[("traffic.sidecar.istio.io/excludeOutboundPorts", "80")]),
        Fate::Keep
    );
    assert_eq!(
        keep(&[(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges",
            "10.9.0.0/16"
        )]),
        Fate::Keep
    );
    assert_eq!(
        keep(&[(
            "traffic.sidecar.istio.io/includeOutboundIPRanges",
            "10.8.0.0/16"
        )]),
        Fate::Keep
    );
    assert_eq!(
        keep(&[(
            "traffic.sidecar.istio.io/includeOutboundIPRanges",
            "10.9.0.0/16"
        )]),
        Fate::End
    );
    assert_eq!(
        keep(&[
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "10.9.0.0/16"
            ),
            ("traffic.sidecar.istio.io/includeOutboundPorts", "80"),
        ]),
        Fate::End
    );
    assert_eq!(
        keep(&[("traffic.sidecar.istio.io/excludeInterfaces", "eth1")]),
        Fate::Unsure
    );
    // Inbound, straight to the application while the rules were missing.
    let inbound = entry("10.9.9.9:50000", "10.0.0.2:8080", "10.0.0.2:8080");
    let accepted = [sock("10.0.0.2:8080", "10.9.9.9:50000", 1000)];
    assert_eq!(fate(&inbound, &accepted, &LOCAL, &redirect(&[])), Fate::End);
    assert_eq!(
        fate(
            &inbound,
            &accepted,
            &LOCAL,
            &redirect(&[("traffic.sidecar.istio.io/excludeInboundPorts", "8080")])
        ),
        Fate::Keep
    );
    assert_eq!(
        fate(
            &inbound,
            &accepted,
            &LOCAL,
            &redirect(&[("traffic.sidecar.istio.io/includeInboundPorts", "9090")])
        ),
        Fate::Keep
    );
    assert_eq!(
        fate(
            &inbound,
            &accepted,
            &LOCAL,
            &redirect(&[("sidecar.istio.io/interceptionMode", "TPROXY")])
        ),
        Fate::Unsure
    );
    // The health ports are excluded by default (15020, 15021, 15090).
    let health = entry("10.9.9.9:50000", "10.0.0.2:15021", "10.0.0.2:15021");
    assert_eq!(
        fate(
            &health,
            &[sock("10.0.0.2:15021", "10.9.9.9:50000", 1000)],
            &LOCAL,
            &redirect(&[])
        ),
        Fate::Keep
    );
}
