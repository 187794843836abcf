//! A tiny JSON layer over `miniserde::json::Value`: parsing with a clear error, typed accessors, and an
//! indenting printer that writes exactly what Go's `encoding/json` `MarshalIndent` writes for the same
//! value (sorted object keys, HTML-safe escapes, Go float formatting), so our files can be byte-identical
//! to upstream's.

use crate::error::{Error, Result};
pub use miniserde::json::{Array, Number, Object, Value};

mod parser;

/// Largest JSON document we accept on any input (the CNI stdin, a conflist, an API response).
pub const MAX_INPUT: usize = 4 << 20;

/// Deepest nesting we accept; real configurations and API objects stay far below it, and it keeps
/// every recursive walk over a parsed value (printing, merging) safely bounded.
pub const MAX_DEPTH: usize = 64;

/// Parses a JSON document; `what` names it in the error ("network configuration", a file path).
pub fn parse(text: &str, what: &str) -> Result<Value> {
    parse_bounded(text, what, MAX_INPUT)
}

/// [`parse`] with another size bound (API list pages can be larger than any configuration); the depth
/// bound is always [`MAX_DEPTH`].
pub fn parse_bounded(text: &str, what: &str, max_len: usize) -> Result<Value> {
    if text.len() > max_len {
        return Err(Error::Decode(format!(
            "{what}: larger than {max_len} bytes"
        )));
    }
    parser::Parser::parse(text, MAX_DEPTH)
        .map_err(|why| Error::Decode(format!("{what}: not valid JSON ({why})")))
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
    write_value(&mut out, v, None, 0);
    out
}

/// Indented JSON as Go's `json.MarshalIndent(v, "", indent)`; no trailing newline.
pub fn to_pretty(v: &Value, indent: &str) -> String {
    let mut out = String::new();
    write_value(&mut out, v, Some(indent), 0);
    out
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

// Recursion is bounded: every parsed value passed `MAX_DEPTH`, and values we build are shallow.
fn write_value(out: &mut String, v: &Value, indent: Option<&str>, depth: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            if a.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_value(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push(']');
        }
        Value::Object(o) => {
            if o.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, item)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_string(out, k);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_value(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push('}');
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
mod tests;
