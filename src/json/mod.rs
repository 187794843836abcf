//! A tiny JSON layer over `miniserde::json::Value`: parsing with a clear error, typed accessors, and an
//! indenting printer that writes exactly what Go's `encoding/json` `MarshalIndent` writes for the same
//! value (sorted object keys, HTML-safe escapes, Go float formatting), so our files can be byte-identical
//! to upstream's.

use crate::error::{Error, Result};
pub use miniserde::json::{Array, Number, Object, Value};

pub mod go_struct;
pub mod ordered;
mod parser;

/// Largest JSON document we accept on any input (the CNI stdin, a conflist, an API response).
pub const MAX_INPUT: usize = 4 << 20;

/// Deepest nesting we accept in what the plugin reads (its stdin) and in API and kubeconfig documents.
/// Nothing real comes near it and a hostile document fails fast. It also bounds the recursion that
/// remains outside this module: miniserde's `Value` clones and debug-formats recursively, and the plugin
/// and the API code clone parsed values (`prevResult`, pod objects) on threads with Rust's default stack.
/// Parsing, printing and dropping are iterative, which is what lets CNI files use [`GO_MAX_DEPTH`].
pub const MAX_DEPTH: usize = 64;

/// Deepest nesting Go's `encoding/json` accepts (`maxNestingDepth` in its scanner). CNI configuration
/// files are read with it ([`parse_go_depth`]): the container runtime (Go) uses a file nested this deep, so
/// refusing it would make us skip the file the runtime uses.
pub const GO_MAX_DEPTH: usize = 10_000;

/// Parses a JSON document; `what` names it in the error ("network configuration", a file path).
pub fn parse(text: &str, what: &str) -> Result<Value> {
    parse_bounded(text, what, MAX_INPUT)
}

/// [`parse`] with another size bound (API list pages can be larger than any configuration); the depth
/// bound is always [`MAX_DEPTH`].
pub fn parse_bounded(text: &str, what: &str, max_len: usize) -> Result<Value> {
    parse_limited(text, what, max_len, MAX_DEPTH)
}

/// [`parse`] allowing Go's nesting depth ([`GO_MAX_DEPTH`]), for documents a Go program reads too.
pub fn parse_go_depth(text: &str, what: &str) -> Result<Value> {
    parse_limited(text, what, MAX_INPUT, GO_MAX_DEPTH)
}

fn parse_limited(text: &str, what: &str, max_len: usize, max_depth: usize) -> Result<Value> {
    if text.len() > max_len {
        return Err(Error::Decode(format!(
            "{what}: larger than {max_len} bytes"
        )));
    }
    parser::Parser::parse(text, max_depth)
        .map_err(|why| Error::Decode(format!("{what}: not valid JSON ({why})")))
}

/// The JSON kind of a value, as Go names it in its errors.
pub fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses a JSON document that must be an object.
pub fn parse_object(text: &str, what: &str) -> Result<Object> {
    match parse(text, what)? {
        Value::Object(o) => Ok(o),
        _ => Err(Error::Decode(format!("{what}: expected a JSON object"))),
    }
}

pub fn str_of<'a>(o: &'a Object, key: &str) -> Option<&'a str> {
    match o.get(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// A string field that may be absent or null, but must be a string if present.
pub fn opt_string(o: &Object, key: &str, what: &str) -> Result<Option<String>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Error::Decode(format!(
            "{what}: field {key:?} must be a string"
        ))),
    }
}

/// A boolean field; absent or null is `None`.
pub fn opt_bool(o: &Object, key: &str, what: &str) -> Result<Option<bool>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(Error::Decode(format!(
            "{what}: field {key:?} must be a boolean"
        ))),
    }
}

/// A list of strings; absent or null is `None`.
pub fn opt_string_list(o: &Object, key: &str, what: &str) -> Result<Option<Vec<String>>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(Error::Decode(format!(
                    "{what}: field {key:?} must be a list of strings"
                ))),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(_) => Err(Error::Decode(format!(
            "{what}: field {key:?} must be a list of strings"
        ))),
    }
}

pub fn obj_of<'a>(o: &'a Object, key: &str) -> Option<&'a Object> {
    match o.get(key) {
        Some(Value::Object(x)) => Some(x),
        _ => None,
    }
}

pub fn arr_of<'a>(o: &'a Object, key: &str) -> Option<&'a Array> {
    match o.get(key) {
        Some(Value::Array(x)) => Some(x),
        _ => None,
    }
}

pub fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

/// Compact JSON (no whitespace), keys sorted.
pub fn to_compact(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, Item::Value(v), None, usize::MAX);
    out
}

/// [`to_compact`] of an object.
pub fn object_to_compact(o: &Object) -> String {
    let mut out = String::new();
    write_value(&mut out, Item::Object(o), None, usize::MAX);
    out
}

/// Indented JSON as Go's `json.MarshalIndent(v, "", indent)`; no trailing newline.
pub fn to_pretty(v: &Value, indent: &str) -> String {
    let mut out = String::new();
    write_value(&mut out, Item::Value(v), Some(indent), usize::MAX);
    out
}

/// [`to_pretty`], or `None` as soon as the text grows past `max_len` bytes: indentation grows with the
/// nesting, so a document thousands of levels deep would print as hundreds of megabytes.
pub fn to_pretty_bounded(v: &Value, indent: &str, max_len: usize) -> Option<String> {
    let mut out = String::new();
    write_value(&mut out, Item::Value(v), Some(indent), max_len).then_some(out)
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

enum Item<'a> {
    Value(&'a Value),
    Object(&'a Object),
}

/// An array or object being printed: what is left of it, and whether an item was printed already.
enum Open<'a> {
    Array(std::slice::Iter<'a, Value>, bool),
    Object(std::collections::btree_map::Iter<'a, String, Value>, bool),
}

/// Prints `item`; false (with `out` cut short) once `out` grows past `max_len`. Iterative (an explicit
/// stack of open containers), so a value as deep as [`GO_MAX_DEPTH`] prints on any thread's stack.
fn write_value(out: &mut String, item: Item<'_>, indent: Option<&str>, max_len: usize) -> bool {
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut next = Some(item);
    loop {
        match next.take() {
            Some(Item::Object(o)) if o.is_empty() => out.push_str("{}"),
            Some(Item::Object(o)) => {
                out.push('{');
                open.push(Open::Object(o.iter(), false));
            }
            Some(Item::Value(v)) => match v {
                Value::Null => out.push_str("null"),
                Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Value::Number(n) => write_number(out, n),
                Value::String(s) => write_string(out, s),
                Value::Array(a) if a.is_empty() => out.push_str("[]"),
                Value::Array(a) => {
                    out.push('[');
                    open.push(Open::Array(a.iter(), false));
                }
                Value::Object(o) => next = Some(Item::Object(o)),
            },
            None => {}
        }
        if next.is_some() {
            continue;
        }
        if out.len() > max_len {
            return false;
        }
        let depth = open.len();
        match open.last_mut() {
            None => return true,
            Some(Open::Array(items, started)) => match items.next() {
                Some(v) => {
                    if std::mem::replace(started, true) {
                        out.push(',');
                    }
                    newline(out, indent, depth);
                    next = Some(Item::Value(v));
                }
                None => {
                    open.pop();
                    newline(out, indent, depth - 1);
                    out.push(']');
                }
            },
            Some(Open::Object(entries, started)) => match entries.next() {
                Some((k, v)) => {
                    if std::mem::replace(started, true) {
                        out.push(',');
                    }
                    newline(out, indent, depth);
                    write_string(out, k);
                    out.push(':');
                    if indent.is_some() {
                        out.push(' ');
                    }
                    next = Some(Item::Value(v));
                }
                None => {
                    open.pop();
                    newline(out, indent, depth - 1);
                    out.push('}');
                }
            },
        }
    }
}

fn write_number(out: &mut String, n: &Number) {
    use std::fmt::Write;
    match n {
        Number::U64(u) => {
            let _ = write!(out, "{u}");
        }
        Number::I64(i) => {
            let _ = write!(out, "{i}");
        }
        Number::F64(f) => out.push_str(&go_float(*f)),
    }
}

/// Go `encoding/json`'s float64 encoding (`floatEncoder`): the shortest representation that reads back
/// exactly, in `strconv.FormatFloat` 'f' format unless `|f|` is below 1e-6 or at least 1e21, then 'e'
/// format with a signed exponent of at least two digits, except that `e-0X` is shortened to `e-X`
/// (so `1e-7`, `1e+21`, `1.2345678901234568e+29`, `-0`).
pub fn go_float(f: f64) -> String {
    if !f.is_finite() {
        // Go refuses to marshal these; our parser never produces them.
        return "null".to_string();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is the shortest round-trip mantissa, like Go's 'e' with precision -1.
        let s = format!("{f:e}");
        if let Some((mant, exp)) = s.split_once('e') {
            return match exp.strip_prefix('-') {
                Some(d) => format!("{mant}e-{d}"),
                None if exp.len() < 2 => format!("{mant}e+0{exp}"),
                None => format!("{mant}e+{exp}"),
            };
        }
        return s;
    }
    // Rust's `Display` for f64 is the shortest round-trip form without an exponent, as Go's 'f' with
    // precision -1, including `-0` for negative zero.
    format!("{f}")
}

/// What `MarshalIndent` prints for a value at nesting `depth` whose items are in an order of their own (a
/// struct's fields, a list's elements): `open`, each item (already printed, for nesting `depth + 1`) on a
/// line of its own, `close`; just `open` and `close` without items.
pub fn block_text(open: char, items: &[String], close: char, indent: &str, depth: usize) -> String {
    let mut out = String::from(open);
    for (i, item) in items.iter().enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&indent.repeat(depth + 1));
        out.push_str(item);
    }
    if !items.is_empty() {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    out
}

/// Writes a JSON string the way Go does: `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u00XX`.
pub fn write_string(out: &mut String, s: &str) {
    write_escaped(out, s, true)
}

/// Writes a JSON string as zap's encoder does (Istio's JSON logs): no HTML escaping, control characters
/// as `\u00XX`.
pub fn write_string_no_html(out: &mut String, s: &str) {
    write_escaped(out, s, false)
}

fn write_escaped(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
pub(crate) mod tests;
