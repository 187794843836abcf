//! Just enough HTTP/1.1: parse a request (Content-Length or chunked bodies) from a reader or from the bytes
//! received so far ([`parse_buffered`], for the event loop), write a response (Content-Length or chunked),
//! keep-alive.

use std::io::{self, BufRead, Read, Write};

const MAX_HEAD: usize = 64 << 10;
const MAX_BODY: usize = 64 << 20;

#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    /// The raw query (after `?`, still percent-encoded), "" when absent.
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
    }

    /// Decoded query parameters, in order.
    pub fn params(&self) -> Vec<(String, String)> {
        parse_query(&self.query)
    }

    pub fn param(&self, k: &str) -> Option<String> {
        self.params()
            .into_iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v)
    }
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Reads one request; `Ok(None)` on a clean EOF before any byte.
pub fn read_request(r: &mut impl BufRead) -> io::Result<Option<HttpRequest>> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = r
            .by_ref()
            .take((MAX_HEAD + 1) as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            if head.is_empty() {
                return Ok(None);
            }
            return Err(bad("eof in request head"));
        }
        if line == b"\r\n" || line == b"\n" {
            if head.is_empty() {
                continue; // tolerate stray CRLF between requests
            }
            break;
        }
        head.extend_from_slice(&line);
        if head.len() > MAX_HEAD {
            return Err(bad("request head too large"));
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let start = lines.next().ok_or_else(|| bad("empty request"))?;
    let mut parts = start.split_whitespace();
    let method = parts.next().ok_or_else(|| bad("no method"))?.to_string();
    let target = parts.next().ok_or_else(|| bad("no target"))?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut req = HttpRequest {
        method,
        path,
        query,
        headers,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        req.body = read_chunked(r)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
        if len > MAX_BODY {
            return Err(bad("body too large"));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(Some(req))
}

/// The end of the request head in `buf` (after any stray CRLFs before it), if it has arrived.
fn head_end(buf: &[u8]) -> Option<usize> {
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let crlf = rest
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = rest.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    [crlf, lf].into_iter().flatten().min().map(|i| start + i)
}

/// One request from the bytes received so far: `Ok(None)` while it is incomplete, else the request and
/// how many bytes it took. A head larger than the limit is an error before it completes.
pub fn parse_buffered(buf: &[u8]) -> io::Result<Option<(HttpRequest, usize)>> {
    if head_end(buf).is_none() {
        return if buf.len() > MAX_HEAD {
            Err(bad("request head too large"))
        } else {
            Ok(None)
        };
    }
    let mut cur = io::Cursor::new(buf);
    match read_request(&mut cur) {
        Ok(Some(r)) => Ok(Some((r, cur.position() as usize))),
        Ok(None) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// A whole line, or `UnexpectedEof` when the input ends inside it (more bytes may still come).
fn read_full_line(r: &mut impl BufRead, line: &mut String) -> io::Result<usize> {
    let n = r.read_line(line)?;
    if !line.ends_with('\n') {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "eof in a line",
        ));
    }
    Ok(n)
}

fn read_chunked(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        read_full_line(r, &mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            let mut trailer = String::new();
            while read_full_line(r, &mut trailer)? > 2 {
                trailer.clear();
            }
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}

pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

pub fn write_response(w: &mut impl Write, code: u16, body: &[u8], close: bool) -> io::Result<()> {
    write_response_with(w, code, body, close, "")
}

/// [`write_response`] with `extra` header lines (each ending in CRLF).
pub fn write_response_with(
    w: &mut impl Write,
    code: u16,
    body: &[u8],
    close: bool,
    extra: &str,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}{extra}\r\n",
        reason_phrase(code),
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Starts a chunked 200 response (a watch stream).
pub fn start_chunked(w: &mut impl Write) -> io::Result<()> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )?;
    w.flush()
}

pub fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()
}

pub fn end_chunked(w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request_with_a_body() {
        let raw = b"PATCH /api/v1/namespaces/a/pods/b/status?x=1%2C2&y HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";
        let r = read_request(&mut &raw[..]).unwrap().unwrap();
        assert_eq!(r.method, "PATCH");
        assert_eq!(r.path, "/api/v1/namespaces/a/pods/b/status");
        assert_eq!(r.param("x").as_deref(), Some("1,2"));
        assert_eq!(r.param("y").as_deref(), Some(""));
        assert_eq!(r.body, b"{}");
        assert!(read_request(&mut &b""[..]).unwrap().is_none());
    }

    #[test]
    fn buffered_requests_wait_for_their_last_byte() {
        let second: &[u8] = b"GET /b HTTP/1.1\r\n\r\n";
        let raw = [
            &b"\r\nPOST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"[..],
            second,
        ]
        .concat();
        let first = raw.len() - second.len();
        for cut in 0..first {
            assert!(parse_buffered(&raw[..cut]).unwrap().is_none(), "{cut}");
        }
        let (r, used) = parse_buffered(&raw).unwrap().unwrap();
        assert_eq!(
            (r.path.as_str(), r.body.as_slice(), used),
            ("/a", &b"abc"[..], first)
        );
        let (r, used) = parse_buffered(&raw[first..]).unwrap().unwrap();
        assert_eq!((r.path.as_str(), used), ("/b", second.len()));
        let chunked: &[u8] =
            b"PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        for cut in 0..chunked.len() {
            assert!(parse_buffered(&chunked[..cut]).unwrap().is_none(), "{cut}");
        }
        assert_eq!(parse_buffered(chunked).unwrap().unwrap().0.body, b"hi");
        assert!(parse_buffered(&vec![b'a'; MAX_HEAD + 1]).is_err());
        assert!(parse_buffered(b"GET\r\n\r\n").is_err());
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Db%20c+d%"), "a=b c d%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
