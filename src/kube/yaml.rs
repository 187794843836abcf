//! Reads the small YAML subset kubeconfig writers use (ours, upstream's `sigs.k8s.io/yaml` output and the
//! seed-era text template) into a JSON value: block mappings, block sequences (`- ` items, also at the
//! parent key's indentation), plain / single-quoted / double-quoted scalars, comments, empty `{}`/`[]`.
//! Everything else (anchors, aliases, tags, block scalars, flow collections with content, tabs) is refused
//! with the line number. Scalars become strings except `true`/`false` (booleans) and `null`/`~` (null).

use crate::error::{Error, Result};
use crate::json::{Array, Object, Value, MAX_DEPTH};

struct Line<'a> {
    no: usize,
    indent: usize,
    text: &'a str,
}

fn err(what: &str, no: usize, msg: &str) -> Error {
    Error::Decode(format!("{what}: line {no}: {msg}"))
}

/// Parses a YAML document of the subset above; `what` names it in errors.
pub fn parse(text: &str, what: &str) -> Result<Value> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let body = raw.trim_end();
        let trimmed = body.trim_start_matches(' ');
        if trimmed.is_empty() || trimmed.starts_with('#') || (no == 1 && trimmed == "---") {
            continue;
        }
        if trimmed.starts_with('\t') {
            return Err(err(what, no, "tab in indentation"));
        }
        lines.push(Line {
            no,
            indent: body.len() - trimmed.len(),
            text: trimmed,
        });
    }
    if lines.is_empty() {
        return Err(Error::Decode(format!("{what}: empty document")));
    }
    let mut p = Parser {
        lines,
        pos: 0,
        what,
    };
    let indent = p.lines[0].indent;
    let v = p.block(indent, 0)?;
    if let Some(l) = p.lines.get(p.pos) {
        return Err(err(what, l.no, "unexpected indentation"));
    }
    Ok(v)
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
    what: &'a str,
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

impl<'a> Parser<'a> {
    fn block(&mut self, indent: usize, depth: usize) -> Result<Value> {
        let Some(first) = self.lines.get(self.pos) else {
            return Ok(Value::Null);
        };
        if depth > MAX_DEPTH {
            return Err(err(self.what, first.no, "nested too deeply"));
        }
        if is_item(first.text) {
            self.sequence(indent, depth)
        } else {
            self.mapping(indent, depth)
        }
    }

    fn sequence(&mut self, indent: usize, depth: usize) -> Result<Value> {
        let mut items = Array::new();
        while let Some(l) = self.lines.get(self.pos) {
            if l.indent != indent || !is_item(l.text) {
                break;
            }
            let no = l.no;
            let rest = l.text[1..].trim_start_matches(' ');
            if rest.is_empty() {
                self.pos += 1;
                items.push(self.nested(indent, depth)?);
                continue;
            }
            if split_key(rest).is_some() {
                // `- key: value`: the item is a mapping whose keys sit where `key` starts.
                let offset = l.text.len() - rest.len();
                self.lines[self.pos] = Line {
                    no,
                    indent: indent + offset,
                    text: rest,
                };
                items.push(self.mapping(indent + offset, depth + 1)?);
            } else {
                self.pos += 1;
                items.push(scalar(rest, self.what, no)?);
            }
        }
        Ok(Value::Array(items))
    }

    /// The value of a key or item whose text ended after `:`/`-`: a deeper block, a sequence at the same
    /// indentation (mapping values only), or null.
    fn nested(&mut self, indent: usize, depth: usize) -> Result<Value> {
        match self.lines.get(self.pos) {
            Some(n) if n.indent > indent => {
                let i = n.indent;
                self.block(i, depth + 1)
            }
            _ => Ok(Value::Null),
        }
    }

    fn mapping(&mut self, indent: usize, depth: usize) -> Result<Value> {
        let mut map = Object::new();
        while let Some(l) = self.lines.get(self.pos) {
            if l.indent < indent || (l.indent == indent && is_item(l.text)) {
                break;
            }
            let no = l.no;
            if l.indent > indent {
                return Err(err(self.what, no, "unexpected indentation"));
            }
            let Some((key, rest)) = split_key(l.text) else {
                return Err(err(self.what, no, "expected \"key: value\""));
            };
            let key = match scalar(key, self.what, no)? {
                Value::String(s) => s,
                Value::Bool(b) => b.to_string(),
                _ => return Err(err(self.what, no, "empty or null key")),
            };
            self.pos += 1;
            let value = if rest.is_empty() {
                match self.lines.get(self.pos) {
                    Some(n) if n.indent == indent && is_item(n.text) => {
                        self.sequence(indent, depth + 1)?
                    }
                    _ => self.nested(indent, depth)?,
                }
            } else {
                scalar(rest, self.what, no)?
            };
            if map.insert(key.clone(), value).is_some() {
                return Err(err(self.what, no, &format!("duplicate key {key:?}")));
            }
        }
        Ok(Value::Object(map))
    }
}

/// Splits `key: value` / `key:` at the first `: ` (or final `:`) outside quotes.
fn split_key(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    let mut quote: Option<u8> = None;
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if (b == b'"' || b == b'\'') && i == 0 => quote = Some(b),
            None if b == b':' && (i + 1 == bytes.len() || bytes[i + 1] == b' ') => {
                return Some((text[..i].trim_end(), text[i + 1..].trim()));
            }
            None => {}
        }
    }
    None
}

fn scalar(text: &str, what: &str, no: usize) -> Result<Value> {
    let t = text.trim();
    if let Some(inner) = t.strip_prefix('"') {
        return double_quoted(inner, what, no).map(Value::String);
    }
    if let Some(inner) = t.strip_prefix('\'') {
        let end = find_single_end(inner).ok_or_else(|| err(what, no, "unterminated quote"))?;
        let tail = inner[end + 1..].trim();
        if !tail.is_empty() && !tail.starts_with('#') {
            return Err(err(what, no, "text after a quoted scalar"));
        }
        return Ok(Value::String(inner[..end].replace("''", "'")));
    }
    // A plain scalar ends at ` #` (comment).
    let t = match t.find(" #") {
        Some(i) => t[..i].trim_end(),
        None => t,
    };
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        "{}" => return Ok(Value::Object(Object::new())),
        "[]" => return Ok(Value::Array(Array::new())),
        _ => {}
    }
    let first = t.chars().next().unwrap_or(' ');
    if matches!(
        first,
        '&' | '*' | '!' | '|' | '>' | '{' | '[' | '%' | '@' | '`'
    ) {
        return Err(err(
            what,
            no,
            &format!("unsupported YAML syntax starting with {first:?}"),
        ));
    }
    Ok(Value::String(t.to_string()))
}

/// Where a single-quoted scalar ends: the first `'` that is not one of a doubled `''`.
fn find_single_end(s: &str) -> Option<usize> {
    let mut bytes = s.bytes().enumerate().peekable();
    while let Some((i, b)) = bytes.next() {
        if b == b'\'' && bytes.next_if(|&(_, n)| n == b'\'').is_none() {
            return Some(i);
        }
    }
    None
}

fn double_quoted(s: &str, what: &str, no: usize) -> Result<String> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let tail = s[i + 1..].trim();
                if !tail.is_empty() && !tail.starts_with('#') {
                    return Err(err(what, no, "text after a quoted scalar"));
                }
                return Ok(out);
            }
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '0' => out.push('\0'),
                    '"' | '\\' | '/' => out.push(e),
                    'u' => {
                        let hex: String = chars.by_ref().take(4).map(|(_, h)| h).collect();
                        let c = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| err(what, no, "bad \\u escape"))?;
                        out.push(c);
                    }
                    _ => return Err(err(what, no, &format!("unsupported escape \\{e}"))),
                }
            }
            c => out.push(c),
        }
    }
    Err(err(what, no, "unterminated quote"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::to_compact;

    #[test]
    fn reads_the_master_kubeconfig_shape() {
        let text = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: QUJD\n    server: https://[fd00::1]:443\n  name: local\ncontexts:\n- context:\n    cluster: local\n    user: istio-cni\n  name: istio-cni-context\ncurrent-context: istio-cni-context\nkind: Config\nusers:\n- name: istio-cni\n  user:\n    token: abc.def\n";
        let v = parse(text, "k").unwrap();
        assert_eq!(
            to_compact(&v),
            r#"{"apiVersion":"v1","clusters":[{"cluster":{"certificate-authority-data":"QUJD","server":"https://[fd00::1]:443"},"name":"local"}],"contexts":[{"context":{"cluster":"local","user":"istio-cni"},"name":"istio-cni-context"}],"current-context":"istio-cni-context","kind":"Config","users":[{"name":"istio-cni","user":{"token":"abc.def"}}]}"#
        );
    }

    #[test]
    fn reads_the_seed_era_template_shape() {
        let text = "# Kubeconfig file for Istio CNI plugin.\napiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://[10.96.0.1]:443\n    insecure-skip-tls-verify: true\nusers:\n- name: istio-cni\n  user:\n    token: \"a\\\"b\"\ncontexts:\n- name: istio-cni-context\n  context:\n    user: istio-cni\n    cluster: local\ncurrent-context: istio-cni-context\n";
        let v = parse(text, "k").unwrap();
        let s = to_compact(&v);
        assert!(s.contains(r#""insecure-skip-tls-verify":true"#), "{s}");
        assert!(s.contains(r#""token":"a\"b""#), "{s}");
        assert!(s.contains(r#""server":"https://[10.96.0.1]:443""#), "{s}");
    }

    #[test]
    fn nested_sequences_and_quotes() {
        let v = parse("a:\n  - x\n  - 'it''s'\n  -\n    b: c # note\nd: []\n", "k").unwrap();
        assert_eq!(to_compact(&v), r#"{"a":["x","it's",{"b":"c"}],"d":[]}"#);
    }

    #[test]
    fn refusals_name_the_line() {
        for (text, msg) in [
            ("a: &x 1\n", "line 1: unsupported"),
            ("a: |\n  x\n", "line 1: unsupported"),
            ("a: 1\n  b: 2\n", "line 2: unexpected indentation"),
            ("just text\n", "line 1: expected"),
            ("a: \"x\n", "unterminated"),
            ("a: 1\na: 2\n", "duplicate key"),
            ("a: {b: 1}\n", "unsupported"),
            ("", "empty document"),
        ] {
            let e = parse(text, "kubeconfig f").unwrap_err().to_string();
            assert!(
                e.contains(msg) && e.starts_with("kubeconfig f"),
                "{text:?}: {e}"
            );
        }
    }
}
