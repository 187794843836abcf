use super::*;
use std::net::TcpStream;

#[test]
fn heads_complete_at_the_blank_line() {
    assert!(head_complete(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(head_complete(b"GET / HTTP/1.0\n\n"));
    assert!(!head_complete(b"GET / HTTP/1.1\r\nHost: x\r\n"));
}

/// RFC 9112 §3: method, target and version separated by exactly one SP each; NBSP, VT, FF, TAB, a
/// double space or a missing version is a 400, never routed.
#[test]
fn request_line_parts_are_separated_by_single_spaces() {
    let route = |p: &str| -> Reply { (200, "text/plain", format!("route {p}\n")) };
    let code = |head: &[u8]| -> String {
        String::from_utf8_lossy(&answer(head, false, &route))[9..12].to_string()
    };
    assert_eq!(code(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"), "200");
    assert_eq!(code(b"HEAD /readyz?x=1 HTTP/1.0\n\n"), "200");
    assert_eq!(code(b"POST /readyz HTTP/1.1\r\n\r\n"), "405");
    for bad in [
        &b"GET\xc2\xa0/readyz HTTP/1.1\r\n\r\n"[..], // NBSP
        b"GET /readyz\xc2\xa0HTTP/1.1\r\n\r\n",
        b"GET\x0b/readyz HTTP/1.1\r\n\r\n", // VT
        b"GET /readyz\x0cHTTP/1.1\r\n\r\n", // FF
        b"GET\t/readyz HTTP/1.1\r\n\r\n",
        b"GET  /readyz HTTP/1.1\r\n\r\n",
        b" GET /readyz HTTP/1.1\r\n\r\n",
        b"GET /readyz HTTP/1.1 \r\n\r\n",
        b"GET /readyz\r\n\r\n",
        b"GET /readyz FTP/1.1\r\n\r\n",
        b"GET /ready\x7fz HTTP/1.1\r\n\r\n",
        b"G(T /readyz HTTP/1.1\r\n\r\n",
    ] {
        assert_eq!(code(bad), "400", "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn which_failures_mean_no_ipv6() {
    assert!(ipv6_unavailable(Errno::EAFNOSUPPORT));
    assert!(ipv6_unavailable(Errno::EADDRNOTAVAIL));
    assert!(!ipv6_unavailable(Errno::EADDRINUSE));
    assert!(!ipv6_unavailable(Errno::EACCES));
}

#[test]
fn falls_back_to_ipv4_only_when_ipv6_is_missing() {
    // The kernel without IPv6 (ipv6.disable=1) refuses AF_INET6 sockets with EAFNOSUPPORT.
    let l = bind_with(0, |_| Err(Errno::EAFNOSUPPORT)).unwrap();
    let addr = l.local_addr().unwrap();
    assert!(addr.is_ipv4(), "{addr}");
    TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
    // A port already taken is an error, not a reason to listen on IPv4 only.
    let e = bind_with(0, |_| Err(Errno::EADDRINUSE)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(Errno::EADDRINUSE as i32));
}

#[test]
fn dual_stack_takes_ipv4_and_ipv6() {
    let l = match bind_dual_stack(0) {
        Ok(l) => l,
        Err(e) if ipv6_unavailable(e) => return,
        Err(e) => panic!("{e}"),
    };
    let port = l.local_addr().unwrap().port();
    TcpStream::connect(("127.0.0.1", port)).unwrap();
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        TcpStream::connect(("::1", port)).unwrap();
    }
}
