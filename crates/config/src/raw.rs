//! The file as written: serde structures that keep the byte span of every
//! value, so that validation can point at the line and field at fault.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use toml::Spanned;

pub(crate) type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub interfaces: Vec<S<RawInterface>>,
    #[serde(default)]
    pub routes: Vec<S<RawRoute>>,
    #[serde(default, alias = "neighbors")]
    pub neighbours: Vec<S<RawNeighbour>>,
    /// The firewall rule set: inline text or a rules file.
    #[serde(default)]
    pub firewall: Option<S<RawFirewall>>,
    /// Reserved for worker / core placement; carried unparsed.
    #[serde(default)]
    pub workers: Option<toml::Value>,
    /// Reserved for the I/O backend; carried unparsed.
    #[serde(default)]
    pub io: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInterface {
    pub name: S<String>,
    #[serde(default)]
    pub port: Option<S<String>>,
    pub mac: S<String>,
    #[serde(default)]
    pub mtu: Option<S<i64>>,
    #[serde(default)]
    pub addresses: Vec<S<String>>,
    #[serde(default)]
    pub vlans: Vec<S<RawVlan>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVlan {
    pub id: S<i64>,
    #[serde(default)]
    pub name: Option<S<String>>,
    #[serde(default)]
    pub mtu: Option<S<i64>>,
    #[serde(default)]
    pub addresses: Vec<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub prefix: S<String>,
    #[serde(default)]
    pub via: Option<S<OneOrMany>>,
    #[serde(default)]
    pub interface: Option<S<String>>,
    #[serde(default)]
    pub next_hops: Option<S<Vec<S<RawNextHop>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNextHop {
    #[serde(default)]
    pub via: Option<S<String>>,
    #[serde(default)]
    pub interface: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNeighbour {
    pub interface: S<String>,
    #[serde(alias = "address")]
    pub ip: S<String>,
    pub mac: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFirewall {
    /// The rules as text (nftables-like, docs/firewall.md).
    #[serde(default)]
    pub rules: Option<S<String>>,
    /// A rules file, relative to the config file's directory.
    #[serde(default)]
    pub file: Option<S<String>>,
}

/// `via = "a"` or `via = ["a", "b"]`, each element with its own span.
#[derive(Debug)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<S<String>>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address or an array of addresses")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<OneOrMany, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = s.next_element()? {
                    v.push(x);
                }
                Ok(OneOrMany::Many(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The shape of any TOML document with spans: used to turn the byte span of
/// a serde error into a field path.
#[derive(Debug)]
pub(crate) enum Node {
    Table(Vec<(S<String>, S<Node>)>),
    Array(Vec<S<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any TOML value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Node, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = s.next_element()? {
                    v.push(x);
                }
                Ok(Node::Array(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Node, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = m.next_entry()? {
                    v.push(x);
                }
                Ok(Node::Table(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Node {
    /// The dotted path of the innermost key or value whose span holds
    /// `offset` (empty at the document root).
    pub(crate) fn path_at(&self, offset: usize) -> String {
        let mut path = String::new();
        let mut node = self;
        loop {
            match node {
                Node::Table(entries) => {
                    let hit = entries
                        .iter()
                        .find(|(k, v)| k.span().contains(&offset) || v.span().contains(&offset));
                    match hit {
                        Some((k, v)) => {
                            if !path.is_empty() {
                                path.push('.');
                            }
                            path.push_str(k.get_ref());
                            if k.span().contains(&offset) {
                                return path;
                            }
                            node = v.get_ref();
                        }
                        None => return path,
                    }
                }
                Node::Array(items) => match items.iter().position(|v| v.span().contains(&offset)) {
                    Some(i) => {
                        path.push_str(&format!("[{i}]"));
                        node = items[i].get_ref();
                    }
                    None => return path,
                },
                Node::Scalar => return path,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_at_finds_nested_fields() {
        let text = "[[routes]]\nprefix = \"1.0.0.0/8\"\n[[routes]]\nprefix = \"2.0.0.0/8\"\nvia = [\"a\", \"b\"]\n";
        let root: Node = toml::from_str(text).unwrap();
        let off = text.find("\"b\"").unwrap() + 1;
        assert_eq!(root.path_at(off), "routes[1].via[1]");
        let off = text.find("prefix").unwrap();
        assert_eq!(root.path_at(off), "routes[0].prefix");
    }
}
