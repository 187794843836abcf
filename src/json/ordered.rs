//! A JSON document as Go's struct decoding walks through it: object keys in source order, duplicate keys
//! kept. [`Value`] keeps what Go's `map[string]interface{}` keeps (the last of duplicate keys, sorted); a
//! struct instead sees every key in turn, so `{"type":1,"type":"x"}` is a type error and the last of
//! several keys matching a field (ignoring case) is the one it keeps.
//!
//! The nodes live in one flat list (children before their parent), so neither building, reading nor
//! dropping a document recurses, however deep it is.

use super::parser::{Build, Parser};
use super::{Error, Result, Value};
use std::collections::BTreeMap;

/// One parsed document; nodes are addressed by [`Id`].
pub struct Doc {
    nodes: Vec<Node>,
    root: Id,
}

/// A node of a [`Doc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id(usize);

pub enum Node {
    /// null, a bool, a number or a string.
    Scalar(Value),
    Array(Vec<Id>),
    /// Entries in source order, duplicate keys kept.
    Object(Vec<(String, Id)>),
}

/// In which order an object's keys are seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// As written, duplicates kept: Go decoding the bytes of the document into a struct.
    Source,
    /// Duplicates collapsed to the last, sorted bytewise: Go decoding into `map[string]interface{}` and
    /// marshalling that again (what libcni does to each plugin of a list).
    Map,
}

impl Doc {
    /// Parses `text` allowing `max_depth` levels of nesting; `what` names it in the error.
    pub fn parse(text: &str, what: &str, max_depth: usize) -> Result<Doc> {
        if text.len() > super::MAX_INPUT {
            return Err(Error::Decode(format!(
                "{what}: larger than {} bytes",
                super::MAX_INPUT
            )));
        }
        let mut b = Nodes(Vec::new());
        let root = Parser::parse_with(text, max_depth, &mut b)
            .map_err(|why| Error::Decode(format!("{what}: not valid JSON ({why})")))?;
        Ok(Doc { nodes: b.0, root })
    }

    pub fn root(&self) -> Id {
        self.root
    }

    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[id.0]
    }

    /// An object's entries in the given key order; empty for anything else.
    pub fn entries(&self, id: Id, keys: Keys) -> Vec<(&str, Id)> {
        let Node::Object(entries) = self.node(id) else {
            return Vec::new();
        };
        match keys {
            Keys::Source => entries.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
            Keys::Map => entries
                .iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect(),
        }
    }

    /// The value under exactly `key` in an object as a Go map holds it (the last such key).
    pub fn get(&self, id: Id, key: &str) -> Option<Id> {
        match self.node(id) {
            Node::Object(entries) => entries.iter().rev().find(|(k, _)| k == key).map(|e| e.1),
            _ => None,
        }
    }

    /// The JSON kind of a node, as Go names it in its type errors.
    pub fn kind(&self, id: Id) -> &'static str {
        match self.node(id) {
            Node::Scalar(v) => super::kind_name(v),
            Node::Array(_) => "array",
            Node::Object(_) => "object",
        }
    }

    pub fn is_null(&self, id: Id) -> bool {
        matches!(self.node(id), Node::Scalar(Value::Null))
    }

    pub fn str(&self, id: Id) -> Option<&str> {
        match self.node(id) {
            Node::Scalar(Value::String(s)) => Some(s),
            _ => None,
        }
    }
}

/// The [`Build`] for a [`Doc`]: every finished value is appended to the list.
struct Nodes(Vec<Node>);

impl Nodes {
    fn add(&mut self, n: Node) -> Id {
        self.0.push(n);
        Id(self.0.len() - 1)
    }
}

impl Build for Nodes {
    type Node = Id;
    type Arr = Vec<Id>;
    type Obj = Vec<(String, Id)>;
    fn scalar(&mut self, v: Value) -> Id {
        self.add(Node::Scalar(v))
    }
    fn array(&mut self) -> Vec<Id> {
        Vec::new()
    }
    fn object(&mut self) -> Vec<(String, Id)> {
        Vec::new()
    }
    fn push(&mut self, a: &mut Vec<Id>, v: Id) {
        a.push(v)
    }
    fn insert(&mut self, o: &mut Vec<(String, Id)>, key: String, v: Id) {
        o.push((key, v))
    }
    fn end_array(&mut self, a: Vec<Id>) -> Id {
        self.add(Node::Array(a))
    }
    fn end_object(&mut self, o: Vec<(String, Id)>) -> Id {
        self.add(Node::Object(o))
    }
}
