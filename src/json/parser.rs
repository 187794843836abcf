//! A JSON reader with Go `encoding/json`'s value semantics (decoding into `interface{}`), so a document we
//! re-print comes out as upstream re-prints it:
//! - numbers are read as `strconv.ParseFloat` reads them (correctly rounded): integers a float64 holds
//!   exactly (|n| <= 2^53) stay integers, everything else (fractions, exponents, `-0`, larger integers)
//!   becomes the `f64` Go would hold;
//!   a number outside the float64 range is an error, as in Go;
//! - a `\u` escape of a lone surrogate becomes U+FFFD, as in Go;
//! - with duplicate keys the last one wins, as in Go's map decoding.
//!
//! The parser is iterative (an explicit stack of open arrays and objects), so the nesting limit is a
//! property of the input we accept, not of the thread's stack: Go's own limit (10,000) parses on a 64 KiB
//! stack. What a document becomes is up to a [`Build`]: a [`Value`] (objects as sorted maps, what Go's
//! `map[string]interface{}` keeps), or [`super::ordered::Doc`] (keys in source order, duplicates kept, what
//! Go's struct decoding walks through).

use crate::json::{Array, Number, Object, Value};

/// What the parser makes of the values it reads. Scalars arrive as [`Value`]s without children.
pub trait Build {
    type Node;
    type Arr;
    type Obj;
    fn scalar(&mut self, v: Value) -> Self::Node;
    fn array(&mut self) -> Self::Arr;
    fn object(&mut self) -> Self::Obj;
    fn push(&mut self, a: &mut Self::Arr, v: Self::Node);
    fn insert(&mut self, o: &mut Self::Obj, key: String, v: Self::Node);
    fn end_array(&mut self, a: Self::Arr) -> Self::Node;
    fn end_object(&mut self, o: Self::Obj) -> Self::Node;
}

/// Builds a [`Value`]: with duplicate keys the last one wins, as in Go's map decoding.
pub struct Values;

impl Build for Values {
    type Node = Value;
    type Arr = Array;
    type Obj = Object;
    fn scalar(&mut self, v: Value) -> Value {
        v
    }
    fn array(&mut self) -> Array {
        Array::new()
    }
    fn object(&mut self) -> Object {
        Object::new()
    }
    fn push(&mut self, a: &mut Array, v: Value) {
        a.push(v)
    }
    fn insert(&mut self, o: &mut Object, key: String, v: Value) {
        o.insert(key, v);
    }
    fn end_array(&mut self, a: Array) -> Value {
        Value::Array(a)
    }
    fn end_object(&mut self, o: Object) -> Value {
        Value::Object(o)
    }
}

/// An array or object still open, with the key its next value goes under.
enum Open<B: Build> {
    Array(B::Arr),
    Object(B::Obj, String),
}

pub struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    max_depth: usize,
}

/// Why a document was refused, for the caller's message.
pub type Fail = String;

impl<'a> Parser<'a> {
    pub fn parse(text: &'a str, max_depth: usize) -> Result<Value, Fail> {
        Self::parse_with(text, max_depth, &mut Values)
    }

    pub fn parse_with<B: Build>(
        text: &'a str,
        max_depth: usize,
        build: &mut B,
    ) -> Result<B::Node, Fail> {
        let mut p = Parser {
            s: text.as_bytes(),
            pos: 0,
            max_depth,
        };
        p.ws();
        let v = p.document(build)?;
        p.ws();
        if p.pos != p.s.len() {
            return Err(p.fail("unexpected text after the value"));
        }
        Ok(v)
    }

    fn fail(&self, what: &str) -> Fail {
        format!("{what} at byte {}", self.pos)
    }

    fn too_deep(&self) -> Fail {
        self.fail(&format!("nested deeper than {} levels", self.max_depth))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, Fail> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.fail("invalid literal"))
        }
    }

    /// An object key and the `:` after it.
    fn key(&mut self) -> Result<String, Fail> {
        self.ws();
        if self.peek() != Some(b'"') {
            return Err(self.fail("expected a string key"));
        }
        let k = self.string()?;
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.fail("expected ':'"));
        }
        self.pos += 1;
        Ok(k)
    }

    /// One whole value: opening brackets push onto `open`, every finished value goes into the innermost
    /// open container, closing brackets pop; the loop ends when the outermost value is finished.
    fn document<B: Build>(&mut self, b: &mut B) -> Result<B::Node, Fail> {
        let mut open: Vec<Open<B>> = Vec::new();
        loop {
            self.ws();
            let mut done = match self.peek() {
                None => return Err(self.fail("unexpected end of input")),
                Some(b'n') => b.scalar(self.literal("null", Value::Null)?),
                Some(b't') => b.scalar(self.literal("true", Value::Bool(true))?),
                Some(b'f') => b.scalar(self.literal("false", Value::Bool(false))?),
                Some(b'"') => b.scalar(Value::String(self.string()?)),
                Some(b'-' | b'0'..=b'9') => b.scalar(Value::Number(self.number()?)),
                Some(c @ (b'[' | b'{')) => {
                    if open.len() >= self.max_depth {
                        return Err(self.too_deep());
                    }
                    self.pos += 1;
                    self.ws();
                    match (c, self.peek()) {
                        (b'[', Some(b']')) => {
                            self.pos += 1;
                            let a = b.array();
                            b.end_array(a)
                        }
                        (b'[', _) => {
                            open.push(Open::Array(b.array()));
                            continue;
                        }
                        (_, Some(b'}')) => {
                            self.pos += 1;
                            let o = b.object();
                            b.end_object(o)
                        }
                        _ => {
                            let k = self.key()?;
                            open.push(Open::Object(b.object(), k));
                            continue;
                        }
                    }
                }
                Some(_) => return Err(self.fail("invalid character")),
            };
            // Hand the finished value up, closing every container that ends right after it.
            loop {
                let Some(top) = open.last_mut() else {
                    return Ok(done);
                };
                self.ws();
                let close = match top {
                    Open::Array(a) => {
                        b.push(a, done);
                        match self.peek() {
                            Some(b',') => false,
                            Some(b']') => true,
                            _ => return Err(self.fail("expected ',' or ']'")),
                        }
                    }
                    Open::Object(o, k) => {
                        b.insert(o, std::mem::take(k), done);
                        match self.peek() {
                            Some(b',') => false,
                            Some(b'}') => true,
                            _ => return Err(self.fail("expected ',' or '}'")),
                        }
                    }
                };
                self.pos += 1;
                if !close {
                    if let Some(Open::Object(_, k)) = open.last_mut() {
                        *k = self.key()?;
                    }
                    break;
                }
                done = match open.pop() {
                    Some(Open::Array(a)) => b.end_array(a),
                    Some(Open::Object(o, _)) => b.end_object(o),
                    None => return Err(self.fail("unbalanced")),
                };
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Number, Fail> {
        let start = self.pos;
        let neg = self.peek() == Some(b'-');
        if neg {
            self.pos += 1;
        }
        let int_start = self.pos;
        let n = self.digits();
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return Err(self.fail("invalid number"));
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            integer = false;
            if self.digits() == 0 {
                return Err(self.fail("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            integer = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.fail("invalid number"));
            }
        }
        // The slice is ASCII digits and signs only.
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        let is_neg_zero = neg && self.s[int_start..self.pos].iter().all(|b| *b == b'0');
        // Integers a float64 holds exactly stay integers; Go's float64 would round the others.
        const EXACT: u64 = 1 << 53;
        if integer && !is_neg_zero {
            if neg {
                if let Ok(i) = text.parse::<i64>() {
                    if i.unsigned_abs() <= EXACT {
                        return Ok(Number::I64(i));
                    }
                }
            } else if let Ok(u) = text.parse::<u64>() {
                if u <= EXACT {
                    return Ok(Number::U64(u));
                }
            }
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Number::F64(f)),
            _ => Err(format!("number {text} is out of the float64 range")),
        }
    }

    fn hex4(&mut self) -> Result<u32, Fail> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.fail("invalid \\u escape"))?;
        self.pos += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<String, Fail> {
        self.pos += 1; // the opening quote
        let mut out = String::new();
        loop {
            let run = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The input is a &str and the run stops only at ASCII bytes, so it is valid UTF-8.
            out.push_str(std::str::from_utf8(&self.s[run..self.pos]).unwrap_or("\u{fffd}"));
            match self.peek() {
                None => return Err(self.fail("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let e = self
                        .peek()
                        .ok_or_else(|| self.fail("unterminated string"))?;
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let c = self.hex4()?;
                            out.push(self.escaped_char(c));
                        }
                        _ => return Err(self.fail("invalid escape")),
                    }
                }
                Some(_) => return Err(self.fail("control character in a string")),
            }
        }
    }

    /// The character of a `\uXXXX` escape, reading the low half of a surrogate pair when one follows;
    /// a lone surrogate is U+FFFD (the following escape, if any, is then read on its own).
    fn escaped_char(&mut self, c: u32) -> char {
        if (0xD800..0xDC00).contains(&c) && self.s[self.pos..].starts_with(b"\\u") {
            let save = self.pos;
            self.pos += 2;
            if let Ok(lo) = self.hex4() {
                if (0xDC00..0xE000).contains(&lo) {
                    let cp = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                    return char::from_u32(cp).unwrap_or('\u{fffd}');
                }
            }
            self.pos = save;
        }
        char::from_u32(c).unwrap_or('\u{fffd}')
    }
}
