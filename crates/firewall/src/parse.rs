//! The rule language: an nftables-like text format.
//!
//! See docs/firewall.md ("Grammar") for the full description. In short:
//!
//! ```text
//! define lan = { 10.0.0.0/8, 192.168.0.0/16 }
//! set blocked { 203.0.113.0/24, 2001:db8::/32 }
//! ct size 65536
//! chain forward {
//!     policy drop
//!     ct state established,related accept
//!     iif lan0 ip saddr $lan tcp dport { 22, 80, 8000-8080 } accept
//!     ip saddr @blocked counter drop
//!     tcp flags syn / syn,ack reject with tcp reset
//! }
//! ```

use crate::rules::{
    Chain, ChainRules, CtState, Family, IcmpxReason, IfaceMatch, Intervals, Policy, RejectWith,
    Rule, RuleAction, RuleSet, complement, normalize,
};
use std::collections::HashMap;
use wire::Cidr;

/// The most elements one list (`{ … }`, `a,b`, a `define` or `set`) may
/// hold once its `$name` / `@name` references are expanded.
pub const MAX_LIST_ELEMENTS: usize = 65_536;
/// The most elements `$name` / `@name` references may expand to in one
/// rule file, all lists together: nested defines cannot multiply beyond it
/// (ten levels of ten references would be 10^10).
pub const MAX_EXPANDED_ELEMENTS: usize = 1 << 20;

/// A rule file error: file, line and what was wrong (naming the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct RuleError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Str(String),
    LBrace,
    RBrace,
    Comma,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn tokenize(text: &str, file: &str) -> Result<Vec<Token>, RuleError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let mut chars = raw.char_indices().peekable();
        while let Some(&(start, c)) = chars.peek() {
            match c {
                '#' => break,
                c if c.is_whitespace() => {
                    chars.next();
                }
                '{' | '}' | ',' | ';' => {
                    chars.next();
                    out.push(Token {
                        tok: match c {
                            '{' => Tok::LBrace,
                            '}' => Tok::RBrace,
                            ',' => Tok::Comma,
                            _ => Tok::End,
                        },
                        line,
                    });
                }
                '"' => {
                    chars.next();
                    let mut s = String::new();
                    let mut closed = false;
                    for (_, c) in chars.by_ref() {
                        if c == '"' {
                            closed = true;
                            break;
                        }
                        s.push(c);
                    }
                    if !closed {
                        return Err(RuleError {
                            file: file.to_string(),
                            line,
                            message: "unterminated string".into(),
                        });
                    }
                    out.push(Token {
                        tok: Tok::Str(s),
                        line,
                    });
                }
                _ => {
                    let mut end = start;
                    while let Some(&(j, c)) = chars.peek() {
                        if c.is_whitespace() || matches!(c, '{' | '}' | ',' | ';' | '#' | '"') {
                            break;
                        }
                        end = j + c.len_utf8();
                        chars.next();
                    }
                    out.push(Token {
                        tok: Tok::Word(raw[start..end].to_string()),
                        line,
                    });
                }
            }
        }
        out.push(Token {
            tok: Tok::End,
            line,
        });
    }
    Ok(out)
}

/// Parses a rule file (or a `[firewall]` config section given as a string).
/// `file_name` is used in error messages.
pub fn parse_rules(text: &str, file_name: &str) -> Result<RuleSet, RuleError> {
    let toks = tokenize(text, file_name)?;
    let mut p = Parser {
        toks,
        pos: 0,
        file: file_name.to_string(),
        defines: HashMap::new(),
        expanded: 0,
        set: RuleSet {
            source: file_name.to_string(),
            ..RuleSet::default()
        },
        chain_seen: [false; 2],
    };
    p.file_body()?;
    Ok(p.set)
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    file: String,
    /// `define` and `set` names: elements with the line they came from.
    defines: HashMap<String, Vec<String>>,
    /// Elements the references expanded to so far.
    expanded: usize,
    set: RuleSet,
    chain_seen: [bool; 2],
}

type PResult<T> = Result<T, RuleError>;

const TCP: u128 = 6;
const UDP: u128 = 17;
const ICMP: u128 = 1;
const ICMPV6: u128 = 58;
const SCTP: u128 = 132;
const UDPLITE: u128 = 136;

impl Parser {
    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(0, |t| t.line)
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(RuleError {
            file: self.file.clone(),
            line: self.line(),
            message: message.into(),
        })
    }

    fn err_at<T>(&self, line: usize, message: impl Into<String>) -> PResult<T> {
        Err(RuleError {
            file: self.file.clone(),
            line,
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }

    fn next_word(&mut self, what: &str) -> PResult<String> {
        match self.peek().cloned() {
            Some(Tok::Word(w)) => {
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!("expected {what}")),
        }
    }

    fn expect_word(&mut self, word: &str) -> PResult<()> {
        match self.peek_word() {
            Some(w) if w == word => {
                self.pos += 1;
                Ok(())
            }
            _ => self.err(format!("expected `{word}`")),
        }
    }

    fn skip_ends(&mut self) {
        while matches!(self.peek(), Some(Tok::End)) {
            self.pos += 1;
        }
    }

    fn at_statement_end(&self) -> bool {
        matches!(self.peek(), None | Some(Tok::End) | Some(Tok::RBrace))
    }

    fn end_statement(&mut self) -> PResult<()> {
        match self.peek() {
            None | Some(Tok::RBrace) => Ok(()),
            Some(Tok::End) => {
                self.pos += 1;
                Ok(())
            }
            Some(t) => {
                let t = format!("{t:?}");
                self.err(format!("unexpected {t} at end of statement"))
            }
        }
    }

    fn file_body(&mut self) -> PResult<()> {
        loop {
            self.skip_ends();
            let Some(tok) = self.peek().cloned() else {
                return Ok(());
            };
            let Tok::Word(w) = tok else {
                return self.err("expected `define`, `set`, `chain`, `ct` or `limit`");
            };
            self.pos += 1;
            match w.as_str() {
                "define" => self.define(true)?,
                "set" => self.define(false)?,
                "chain" => self.chain()?,
                "ct" => self.ct_setting()?,
                "limit" => self.limit_setting()?,
                other => {
                    return self.err(format!(
                        "unknown statement `{other}` (expected define, set, chain, ct or limit)"
                    ));
                }
            }
            self.end_statement()?;
        }
    }

    fn define(&mut self, with_eq: bool) -> PResult<()> {
        let line = self.line();
        let name = self.next_word("a name")?;
        if with_eq {
            self.expect_word("=")?;
        } else if self.peek_word() == Some("=") {
            self.pos += 1;
        }
        let elems = self.list("set elements")?;
        if self.defines.insert(name.clone(), elems).is_some() {
            return self.err_at(line, format!("`{name}` is defined twice"));
        }
        Ok(())
    }

    fn ct_setting(&mut self) -> PResult<()> {
        let what = self.next_word("`size` or `timeout`")?;
        match what.as_str() {
            "size" => {
                let n = self.next_word("a table size")?;
                match n.parse::<usize>() {
                    Ok(v) if (16..=1 << 26).contains(&v) => self.set.conntrack.size = v,
                    _ => {
                        return self
                            .err(format!("ct size: `{n}` is not a number in 16..=67108864"));
                    }
                }
            }
            "timeout" => {
                let name = self.next_word("a timeout name")?;
                let secs = self.next_word("seconds")?;
                let Ok(v) = secs.parse::<u64>() else {
                    return self.err(format!(
                        "ct timeout {name}: `{secs}` is not a number of seconds"
                    ));
                };
                let cfg = &mut self.set.conntrack;
                let slot = match name.as_str() {
                    "tcp-syn" => &mut cfg.tcp_syn,
                    "tcp-established" => &mut cfg.tcp_established,
                    "tcp-closing" => &mut cfg.tcp_closing,
                    "udp-new" => &mut cfg.udp_new,
                    "udp-established" => &mut cfg.udp_established,
                    "icmp" => &mut cfg.icmp,
                    "other" => &mut cfg.other,
                    _ => {
                        return Err(RuleError {
                            file: self.file.clone(),
                            line: self.toks[self.pos - 1].line,
                            message: format!(
                                "ct timeout: unknown `{name}` (tcp-syn, tcp-established, tcp-closing, udp-new, udp-established, icmp, other)"
                            ),
                        });
                    }
                };
                *slot = v;
            }
            other => return self.err(format!("ct: unknown setting `{other}` (size, timeout)")),
        }
        Ok(())
    }

    fn limit_setting(&mut self) -> PResult<()> {
        self.expect_word("reject")?;
        let rate = self.next_word("RATE/second")?;
        let per_second = rate
            .strip_suffix("/second")
            .and_then(|n| n.parse::<u64>().ok());
        let Some(per_second) = per_second else {
            return self.err(format!("limit reject: `{rate}` is not N/second"));
        };
        let mut burst = per_second.max(1);
        if self.peek_word() == Some("burst") {
            self.pos += 1;
            let b = self.next_word("a burst size")?;
            burst = match b.parse() {
                Ok(v) => v,
                Err(_) => return self.err(format!("limit reject burst: `{b}` is not a number")),
            };
        }
        self.set.reject_limit = crate::rules::RejectLimit { per_second, burst };
        Ok(())
    }

    fn chain(&mut self) -> PResult<()> {
        let name = self.next_word("a chain name")?;
        let chain = match name.as_str() {
            "forward" => Chain::Forward,
            "input" => Chain::Input,
            other => return self.err(format!("unknown chain `{other}` (forward, input)")),
        };
        if self.chain_seen[chain.index()] {
            return self.err(format!("chain {name} is defined twice"));
        }
        self.chain_seen[chain.index()] = true;
        if self.peek() != Some(&Tok::LBrace) {
            return self.err("expected `{` after the chain name");
        }
        self.pos += 1;
        let mut rules = ChainRules::default();
        loop {
            self.skip_ends();
            match self.peek() {
                None => return self.err(format!("chain {name}: missing `}}`")),
                Some(Tok::RBrace) => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            match self.peek_word() {
                Some("policy") => {
                    self.pos += 1;
                    let p = self.next_word("accept or drop")?;
                    rules.policy = match p.as_str() {
                        "accept" => Policy::Accept,
                        "drop" => Policy::Drop,
                        _ => return self.err(format!("policy: `{p}` is not accept or drop")),
                    };
                }
                Some("type") => {
                    // nftables' `type filter hook forward priority 0` is accepted and ignored.
                    while !self.at_statement_end() {
                        self.pos += 1;
                    }
                }
                _ => {
                    let r = self.rule()?;
                    rules.rules.push(r);
                }
            }
            self.end_statement()?;
        }
        self.set.chains[chain.index()] = rules;
        Ok(())
    }

    /// Reads `{ a, b, … }`, `a,b,…`, `$name` or `@name`, expanding names.
    fn list(&mut self, what: &str) -> PResult<Vec<String>> {
        let mut out = Vec::new();
        if self.peek() == Some(&Tok::LBrace) {
            self.pos += 1;
            loop {
                match self.peek().cloned() {
                    Some(Tok::RBrace) => {
                        self.pos += 1;
                        break;
                    }
                    Some(Tok::End) | Some(Tok::Comma) => self.pos += 1,
                    Some(Tok::Word(w)) => {
                        self.pos += 1;
                        self.expand(w, &mut out)?;
                    }
                    Some(Tok::Str(_)) | Some(Tok::LBrace) => {
                        return self.err(format!("{what}: unexpected token in a list"));
                    }
                    None => return self.err(format!("{what}: missing `}}`")),
                }
            }
        } else {
            let w = self.next_word(what)?;
            self.expand(w, &mut out)?;
            while self.peek() == Some(&Tok::Comma) {
                self.pos += 1;
                let w = self.next_word(what)?;
                self.expand(w, &mut out)?;
            }
        }
        if out.is_empty() {
            return self.err(format!("{what}: empty list"));
        }
        Ok(out)
    }

    fn expand(&mut self, w: String, out: &mut Vec<String>) -> PResult<()> {
        let add = match w.strip_prefix('$').or_else(|| w.strip_prefix('@')) {
            Some(name) => match self.defines.get(name) {
                Some(v) => v.len(),
                None => return self.err(format!("`{w}` is not defined")),
            },
            None => 1,
        };
        if out.len() + add > MAX_LIST_ELEMENTS {
            return self.err(format!(
                "a list of more than {MAX_LIST_ELEMENTS} elements (with `{w}`)"
            ));
        }
        if w.starts_with(['$', '@']) {
            self.expanded += add;
            if self.expanded > MAX_EXPANDED_ELEMENTS {
                return self.err(format!(
                    "references expand to more than {MAX_EXPANDED_ELEMENTS} elements in all (at `{w}`)"
                ));
            }
        }
        match w.strip_prefix('$').or_else(|| w.strip_prefix('@')) {
            Some(name) => out.extend(self.defines.get(name).into_iter().flatten().cloned()),
            None => out.push(w),
        }
        Ok(())
    }

    fn negation(&mut self) -> bool {
        match self.peek_word() {
            Some("!=") => {
                self.pos += 1;
                true
            }
            Some("==") => {
                self.pos += 1;
                false
            }
            _ => false,
        }
    }

    fn rule(&mut self) -> PResult<Rule> {
        let line = self.line();
        let start = self.pos;
        let mut r = Rule::any(RuleAction::Count);
        let mut action: Option<RuleAction> = None;
        let mut counter = false;
        let mut implied_proto: Option<Intervals> = None;
        let mut aux_kind: Option<&'static str> = None;
        while !self.at_statement_end() {
            if action.is_some() {
                if self.peek_word() == Some("comment") {
                    self.pos += 1;
                    self.comment()?;
                    continue;
                }
                return self.err("nothing may follow the verdict except `comment`");
            }
            let w = match self.peek().cloned() {
                Some(Tok::Word(w)) => w,
                _ => return self.err("expected a match, `counter` or a verdict"),
            };
            self.pos += 1;
            match w.as_str() {
                "iif" | "iifname" | "oif" | "oifname" => {
                    let negate = self.negation();
                    let names = self.list(&w)?;
                    let m = Some(IfaceMatch { names, negate });
                    let slot = if w.starts_with('i') {
                        &mut r.iif
                    } else {
                        &mut r.oif
                    };
                    if slot.is_some() {
                        return self.err(format!("{w} given twice"));
                    }
                    *slot = m;
                }
                "ip" | "ip6" => {
                    let fam = if w == "ip" { Family::V4 } else { Family::V6 };
                    self.set_family(&mut r, fam, &w)?;
                    let what = self.next_word("saddr, daddr, protocol or nexthdr")?;
                    let field = format!("{w} {what}");
                    match what.as_str() {
                        "saddr" | "daddr" => {
                            let negate = self.negation();
                            let elems = self.list(&field)?;
                            let iv = self.addresses(&elems, fam, negate, &field)?;
                            let slot = if what == "saddr" {
                                &mut r.src
                            } else {
                                &mut r.dst
                            };
                            if slot.is_some() {
                                return self.err(format!("{field} given twice"));
                            }
                            *slot = Some(iv);
                        }
                        "protocol" | "nexthdr" => self.proto_match(&mut r, &field)?,
                        other => {
                            return self.err(format!(
                                "{w}: unknown field `{other}` (saddr, daddr, protocol, nexthdr)"
                            ));
                        }
                    }
                }
                "meta" => {
                    let what = self.next_word("l4proto, iifname or oifname")?;
                    match what.as_str() {
                        "l4proto" => self.proto_match(&mut r, "meta l4proto")?,
                        "iifname" | "oifname" | "iif" | "oif" => {
                            let negate = self.negation();
                            let names = self.list(&what)?;
                            let m = Some(IfaceMatch { names, negate });
                            if what.starts_with('i') {
                                r.iif = m;
                            } else {
                                r.oif = m;
                            }
                        }
                        other => return self.err(format!("meta: unknown key `{other}`")),
                    }
                }
                "l4proto" => self.proto_match(&mut r, "l4proto")?,
                "tcp" | "udp" | "sctp" | "udplite" | "th" => {
                    let protos: Intervals = match w.as_str() {
                        "tcp" => vec![(TCP, TCP)],
                        "udp" => vec![(UDP, UDP)],
                        "sctp" => vec![(SCTP, SCTP)],
                        "udplite" => vec![(UDPLITE, UDPLITE)],
                        _ => normalize(vec![
                            (TCP, TCP),
                            (UDP, UDP),
                            (SCTP, SCTP),
                            (UDPLITE, UDPLITE),
                        ]),
                    };
                    implied_proto = Some(intersect_opt(implied_proto.as_ref(), &protos));
                    let what = self.next_word("sport, dport or flags")?;
                    let field = format!("{w} {what}");
                    match what.as_str() {
                        "sport" | "dport" => {
                            let negate = self.negation();
                            let elems = self.list(&field)?;
                            let mut iv = Vec::new();
                            for e in &elems {
                                iv.push(self.port_range(e, &field)?);
                            }
                            let mut iv = normalize(iv);
                            if negate {
                                iv = complement(&iv, u16::MAX as u128);
                            }
                            let slot = if what == "sport" {
                                &mut r.sport
                            } else {
                                &mut r.dport
                            };
                            *slot = Some(intersect_opt(slot.as_ref(), &iv));
                        }
                        "flags" if w == "tcp" => {
                            if aux_kind.is_some_and(|k| k != "tcp flags") {
                                return self
                                    .err("tcp flags and icmp type cannot be matched together");
                            }
                            aux_kind = Some("tcp flags");
                            let iv = self.tcp_flags()?;
                            r.aux = Some(intersect_opt(r.aux.as_ref(), &iv));
                        }
                        other => return self.err(format!("{w}: unknown field `{other}`")),
                    }
                }
                "icmp" | "icmpv6" => {
                    let (fam, proto, field) = if w == "icmp" {
                        (Family::V4, ICMP, "icmp type")
                    } else {
                        (Family::V6, ICMPV6, "icmpv6 type")
                    };
                    self.set_family(&mut r, fam, &w)?;
                    implied_proto =
                        Some(intersect_opt(implied_proto.as_ref(), &vec![(proto, proto)]));
                    self.expect_word("type")?;
                    if aux_kind.is_some_and(|k| k != field) {
                        return self.err("tcp flags and icmp type cannot be matched together");
                    }
                    aux_kind = Some(field);
                    let negate = self.negation();
                    let elems = self.list(field)?;
                    let mut iv = Vec::new();
                    for e in &elems {
                        let Some(t) = icmp_type(e, fam) else {
                            return self.err(format!("{field}: unknown type `{e}`"));
                        };
                        iv.push((t as u128, t as u128));
                    }
                    let mut iv = normalize(iv);
                    if negate {
                        iv = complement(&iv, 255);
                    }
                    r.aux = Some(intersect_opt(r.aux.as_ref(), &iv));
                }
                "ct" => {
                    self.expect_word("state")?;
                    let negate = self.negation();
                    let elems = self.list("ct state")?;
                    let mut iv = Vec::new();
                    for e in &elems {
                        let Some(s) = CtState::from_word(e) else {
                            return self.err(format!(
                                "ct state: unknown state `{e}` (new, established, related, invalid, untracked)"
                            ));
                        };
                        iv.push((s as u128, s as u128));
                    }
                    let mut iv = normalize(iv);
                    if negate {
                        iv = complement(&iv, CtState::COUNT - 1);
                    }
                    r.ct = Some(intersect_opt(r.ct.as_ref(), &iv));
                }
                "counter" => counter = true,
                "comment" => self.comment()?,
                "accept" => action = Some(RuleAction::Accept),
                "drop" => action = Some(RuleAction::Drop),
                "reject" => action = Some(RuleAction::Reject(self.reject_with()?)),
                other => return self.err(format!("unknown match or statement `{other}`")),
            }
        }
        if let Some(p) = implied_proto {
            r.proto = Some(intersect_opt(r.proto.as_ref(), &p));
        }
        let action = match action {
            Some(a) => a,
            None if counter => RuleAction::Count,
            None => {
                return self.err_at(
                    line,
                    "rule has no verdict (accept, drop, reject) and no counter",
                );
            }
        };
        if action == RuleAction::Reject(RejectWith::TcpReset)
            && r.proto
                .as_ref()
                .is_none_or(|p| p.as_slice() != [(TCP, TCP)])
        {
            return self.err_at(line, "reject with tcp reset: the rule must match only TCP (add `ip protocol tcp` or a `tcp` match)");
        }
        if let RuleAction::Reject(RejectWith::Icmp(_)) = action {
            self.set_family(&mut r, Family::V4, "reject with icmp")?;
        }
        if let RuleAction::Reject(RejectWith::Icmp6(_)) = action {
            self.set_family(&mut r, Family::V6, "reject with icmpv6")?;
        }
        r.action = action;
        r.line = line;
        r.text = self.toks[start..self.pos]
            .iter()
            .map(|t| match &t.tok {
                Tok::Word(w) => w.clone(),
                Tok::Str(s) => format!("\"{s}\""),
                Tok::LBrace => "{".into(),
                Tok::RBrace => "}".into(),
                Tok::Comma => ",".into(),
                Tok::End => ";".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
            .replace(" ,", ",");
        Ok(r)
    }

    fn comment(&mut self) -> PResult<()> {
        match self.peek() {
            Some(Tok::Str(_)) | Some(Tok::Word(_)) => {
                self.pos += 1;
                Ok(())
            }
            _ => self.err("comment: expected a quoted string"),
        }
    }

    fn set_family(&self, r: &mut Rule, fam: Family, what: &str) -> PResult<()> {
        match r.family {
            Some(f) if f != fam => self.err(format!(
                "{what}: the rule already matches the other address family"
            )),
            _ => {
                r.family = Some(fam);
                Ok(())
            }
        }
    }

    fn proto_match(&mut self, r: &mut Rule, field: &str) -> PResult<()> {
        let negate = self.negation();
        let elems = self.list(field)?;
        let mut iv = Vec::new();
        for e in &elems {
            let Some(p) = protocol(e) else {
                return self.err(format!("{field}: unknown protocol `{e}`"));
            };
            iv.push((p as u128, p as u128));
        }
        let mut iv = normalize(iv);
        if negate {
            iv = complement(&iv, 255);
        }
        r.proto = Some(intersect_opt(r.proto.as_ref(), &iv));
        Ok(())
    }

    fn addresses(
        &self,
        elems: &[String],
        fam: Family,
        negate: bool,
        field: &str,
    ) -> PResult<Intervals> {
        let mut iv = Vec::with_capacity(elems.len());
        for e in elems {
            let c: Cidr = match e.parse() {
                Ok(c) => c,
                Err(err) => return self.err(format!("{field}: `{e}`: {err}")),
            };
            match (c, fam) {
                (Cidr::V4(p), Family::V4) => iv.push((p.addr() as u128, p.last() as u128)),
                (Cidr::V6(p), Family::V6) => iv.push((p.addr(), p.last())),
                _ => {
                    return self.err(format!(
                        "{field}: `{e}` is of the other address family (use `ip` for IPv4, `ip6` for IPv6)"
                    ))
                }
            }
        }
        let iv = normalize(iv);
        Ok(if negate {
            complement(&iv, fam.max_addr())
        } else {
            iv
        })
    }

    fn port_range(&self, e: &str, field: &str) -> PResult<(u128, u128)> {
        let parse = |s: &str| -> Option<u16> { s.parse().ok().or_else(|| service(s)) };
        let (lo, hi) = match e.split_once('-') {
            Some((a, b)) => (parse(a), parse(b)),
            None => (parse(e), parse(e)),
        };
        match (lo, hi) {
            (Some(lo), Some(hi)) if lo <= hi => Ok((lo as u128, hi as u128)),
            (Some(_), Some(_)) => self.err(format!("{field}: range `{e}` is reversed")),
            _ => self.err(format!(
                "{field}: `{e}` is not a port, a range or a known service"
            )),
        }
    }

    fn flag_list(&mut self) -> PResult<u8> {
        let mut v = 0u8;
        let elems = self.list("tcp flags")?;
        for e in &elems {
            let Some(f) = tcp_flag(e) else {
                return self.err(format!(
                    "tcp flags: unknown flag `{e}` (fin, syn, rst, psh, ack, urg, ecn, cwr)"
                ));
            };
            v |= f;
        }
        Ok(v)
    }

    fn tcp_flags(&mut self) -> PResult<Intervals> {
        let (negate, exact) = match self.peek_word() {
            Some("!=") => {
                self.pos += 1;
                (true, true)
            }
            Some("==") => {
                self.pos += 1;
                (false, true)
            }
            _ => (false, false),
        };
        let value = self.flag_list()?;
        let mut values: Vec<u8> = if self.peek_word() == Some("/") {
            self.pos += 1;
            let mask = self.flag_list()?;
            (0..=255u8).filter(|v| v & mask == value).collect()
        } else if exact {
            vec![value]
        } else {
            (0..=255u8).filter(|v| v & value != 0).collect()
        };
        if negate {
            values = (0..=255u8).filter(|v| !values.contains(v)).collect();
        }
        Ok(normalize(
            values.into_iter().map(|v| (v as u128, v as u128)).collect(),
        ))
    }

    fn reject_with(&mut self) -> PResult<RejectWith> {
        if self.peek_word() != Some("with") {
            return Ok(RejectWith::Default);
        }
        self.pos += 1;
        let kind = self.next_word("tcp, icmp, icmpv6 or icmpx")?;
        match kind.as_str() {
            "tcp" => {
                self.expect_word("reset")?;
                Ok(RejectWith::TcpReset)
            }
            "icmp" | "icmpv6" | "icmpx" => {
                if self.peek_word() == Some("type") {
                    self.pos += 1;
                }
                let reason = self.next_word("an unreachable reason")?;
                let r = match reason.as_str() {
                    "port-unreachable" => IcmpxReason::PortUnreachable,
                    "host-unreachable" | "addr-unreachable" => IcmpxReason::HostUnreachable,
                    "net-unreachable" | "no-route" => IcmpxReason::NoRoute,
                    "admin-prohibited" | "host-prohibited" | "net-prohibited" => IcmpxReason::AdminProhibited,
                    other => {
                        return self.err(format!(
                            "reject with {kind}: unknown reason `{other}` (port-unreachable, host-unreachable, net-unreachable, admin-prohibited)"
                        ))
                    }
                };
                Ok(match kind.as_str() {
                    "icmp" => RejectWith::Icmp(r.v4_code()),
                    "icmpv6" => RejectWith::Icmp6(r.v6_code()),
                    _ => RejectWith::Icmpx(r),
                })
            }
            other => self.err(format!(
                "reject with: unknown `{other}` (tcp reset, icmp, icmpv6, icmpx)"
            )),
        }
    }
}

/// Intersection of normalised intervals; `None` stands for "any".
fn intersect_opt(a: Option<&Intervals>, b: &Intervals) -> Intervals {
    let Some(a) = a else { return b.clone() };
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn protocol(s: &str) -> Option<u8> {
    Some(match s {
        "icmp" => 1,
        "igmp" => 2,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        "udplite" => 136,
        _ => return s.parse().ok(),
    })
}

fn service(s: &str) -> Option<u16> {
    Some(match s {
        "ftp" => 21,
        "ssh" => 22,
        "telnet" => 23,
        "smtp" => 25,
        "domain" => 53,
        "bootps" => 67,
        "bootpc" => 68,
        "http" => 80,
        "ntp" => 123,
        "bgp" => 179,
        "https" => 443,
        "submission" => 587,
        "imaps" => 993,
        _ => return None,
    })
}

fn tcp_flag(s: &str) -> Option<u8> {
    Some(match s {
        "fin" => 0x01,
        "syn" => 0x02,
        "rst" => 0x04,
        "psh" => 0x08,
        "ack" => 0x10,
        "urg" => 0x20,
        "ecn" => 0x40,
        "cwr" => 0x80,
        _ => return None,
    })
}

fn icmp_type(s: &str, fam: Family) -> Option<u8> {
    let named = match fam {
        Family::V4 => match s {
            "echo-reply" => Some(0),
            "destination-unreachable" => Some(3),
            "source-quench" => Some(4),
            "redirect" => Some(5),
            "echo-request" => Some(8),
            "router-advertisement" => Some(9),
            "router-solicitation" => Some(10),
            "time-exceeded" => Some(11),
            "parameter-problem" => Some(12),
            "timestamp-request" => Some(13),
            "timestamp-reply" => Some(14),
            _ => None,
        },
        Family::V6 => match s {
            "destination-unreachable" => Some(1),
            "packet-too-big" => Some(2),
            "time-exceeded" => Some(3),
            "parameter-problem" => Some(4),
            "echo-request" => Some(128),
            "echo-reply" => Some(129),
            "mld-listener-query" => Some(130),
            "mld-listener-report" => Some(131),
            "mld-listener-done" => Some(132),
            "nd-router-solicit" => Some(133),
            "nd-router-advert" => Some(134),
            "nd-neighbor-solicit" => Some(135),
            "nd-neighbor-advert" => Some(136),
            "nd-redirect" => Some(137),
            _ => None,
        },
    };
    named.or_else(|| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
# office firewall
define lan = { 10.0.0.0/8, 192.168.0.0/16 }
set blocked { 203.0.113.0/24,
              198.51.100.7 }
ct size 1024
ct timeout tcp-established 600
limit reject 10/second burst 5

chain forward {
    type filter hook forward priority 0; policy drop
    ct state established,related accept
    iif lan0 ip saddr $lan tcp dport { 22, http, 8000-8080 } accept
    ip saddr @blocked counter drop
    tcp flags syn / syn,ack reject with tcp reset
    ip6 daddr != 2001:db8::/32 icmpv6 type echo-request accept comment "ping out"
    udp dport 53 counter
}
chain input {
    policy accept
    iifname { wan0, wan1 } icmp type { echo-request, 13 } reject with icmpx type admin-prohibited
}
"#;

    #[test]
    fn parses_the_sample() {
        let rs = parse_rules(SAMPLE, "fw.rules").unwrap();
        let fwd = rs.chain(Chain::Forward);
        assert_eq!(fwd.policy, Policy::Drop);
        assert_eq!(fwd.rules.len(), 6);
        assert_eq!(rs.conntrack.size, 1024);
        assert_eq!(rs.conntrack.tcp_established, 600);
        assert_eq!(rs.reject_limit.per_second, 10);
        assert_eq!(rs.reject_limit.burst, 5);

        let r0 = &fwd.rules[0];
        assert_eq!(r0.ct, Some(vec![(2, 3)]));
        assert_eq!(r0.action, RuleAction::Accept);

        let r1 = &fwd.rules[1];
        assert_eq!(r1.line, 13);
        assert_eq!(r1.family, Some(Family::V4));
        assert_eq!(r1.proto, Some(vec![(6, 6)]));
        assert_eq!(r1.dport, Some(vec![(22, 22), (80, 80), (8000, 8080)]));
        assert_eq!(
            r1.src,
            Some(vec![(0x0a00_0000, 0x0aff_ffff), (0xc0a8_0000, 0xc0a8_ffff)])
        );
        assert_eq!(r1.iif.as_ref().unwrap().names, vec!["lan0".to_string()]);

        let r2 = &fwd.rules[2];
        assert_eq!(r2.src.as_ref().unwrap().len(), 2);
        assert_eq!(r2.action, RuleAction::Drop);

        let r3 = &fwd.rules[3];
        assert_eq!(r3.action, RuleAction::Reject(RejectWith::TcpReset));
        let aux = r3.aux.as_ref().unwrap();
        // syn set, ack clear: 0x02 is in, 0x12 is not.
        assert!(crate::rules::contains(aux, 0x02));
        assert!(crate::rules::contains(aux, 0x03));
        assert!(!crate::rules::contains(aux, 0x12));
        assert!(!crate::rules::contains(aux, 0x10));

        let r4 = &fwd.rules[4];
        assert_eq!(r4.family, Some(Family::V6));
        assert_eq!(r4.proto, Some(vec![(58, 58)]));
        assert_eq!(r4.aux, Some(vec![(128, 128)]));
        let dst = r4.dst.as_ref().unwrap();
        assert!(!crate::rules::contains(dst, 0x2001_0db8u128 << 96));
        assert!(crate::rules::contains(dst, 0x2001_0db9u128 << 96));

        assert_eq!(fwd.rules[5].action, RuleAction::Count);

        let inp = rs.chain(Chain::Input);
        assert_eq!(inp.rules[0].aux, Some(vec![(8, 8), (13, 13)]));
        assert_eq!(
            inp.rules[0].action,
            RuleAction::Reject(RejectWith::Icmpx(IcmpxReason::AdminProhibited))
        );
        assert!(rs.uses_conntrack());
    }

    fn error_of(text: &str) -> RuleError {
        parse_rules(text, "bad.rules").unwrap_err()
    }

    /// Defines that reference defines cannot multiply without bound: ten
    /// levels of ten references (10^10 elements) are refused at the level
    /// that passes a limit, at once; a large but bounded set is accepted.
    #[test]
    fn nested_defines_are_bounded() {
        let mut text = String::from(
            "define d0 = { 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6, 10.0.0.7, 10.0.0.8, 10.0.0.9, 10.0.0.10 }\n",
        );
        for level in 1..10 {
            let refs = vec![format!("$d{}", level - 1); 10].join(", ");
            text.push_str(&format!("define d{level} = {{ {refs} }}\n"));
        }
        text.push_str("chain forward {\n ip saddr $d9 drop\n}\n");
        let t = std::time::Instant::now();
        let e = error_of(&text);
        assert!(e.message.contains("more than 65536"), "{e}");
        assert_eq!(e.line, 5, "d4 would hold 10^5: {e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        // Many lists each under the list limit, over the total.
        let mut text = String::from("define big = { ");
        text.push_str(
            &(0..60_000)
                .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
                .collect::<Vec<_>>()
                .join(", "),
        );
        text.push_str(" }\n");
        for i in 0..18 {
            text.push_str(&format!("define copy{i} = {{ $big }}\n"));
        }
        let e = error_of(&text);
        assert!(e.message.contains("expand to more than 1048576"), "{e}");
        // Within both: accepted.
        let ok = "define a = { 10.0.0.0/8, 172.16.0.0/12 }\ndefine b = { $a, $a, 192.168.0.0/16 }\nchain forward {\n ip saddr $b drop\n}\n";
        assert!(parse_rules(ok, "ok.rules").is_ok());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = error_of("chain forward {\n  accept\n  ip saddr 10.0.0.1/8 drop\n}\n");
        assert_eq!(e.file, "bad.rules");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("ip saddr"), "{e}");
        assert!(e.to_string().starts_with("bad.rules:3: "));

        let e = error_of("chain forward {\n\n tcp dport 90-80 accept\n}");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("tcp dport"), "{e}");

        let e = error_of("chain forward {\n ip saddr $nope accept\n}");
        assert!(e.message.contains("$nope"), "{e}");

        let e = error_of("chain forward {\n ip saddr 2001:db8::/32 accept\n}");
        assert!(e.message.contains("other address family"), "{e}");

        let e = error_of("chain forward {\n udp dport 53 reject with tcp reset\n}");
        assert!(e.message.contains("tcp reset"), "{e}");

        let e = error_of("chain forward {\n ip saddr 10.0.0.0/8\n}");
        assert!(e.message.contains("no verdict"), "{e}");

        let e = error_of("chain output {\n}");
        assert!(e.message.contains("unknown chain"), "{e}");

        let e = error_of("chain forward {\n accept drop\n}");
        assert!(e.message.contains("verdict"), "{e}");

        let e = error_of("chain forward {\n accept\n");
        assert!(e.message.contains("missing"), "{e}");

        let e = error_of("chain forward {\n ip saddr 1.2.3.4 ip6 daddr ::1 accept\n}");
        assert!(e.message.contains("family"), "{e}");
    }

    #[test]
    fn negated_ports_and_protocols() {
        let rs = parse_rules(
            "chain input {\n tcp dport != 1-1023 accept\n meta l4proto != { tcp, udp } drop\n}",
            "x",
        )
        .unwrap();
        let r = &rs.chain(Chain::Input).rules;
        assert_eq!(r[0].dport, Some(vec![(0, 0), (1024, 65535)]));
        assert_eq!(r[1].proto, Some(vec![(0, 5), (7, 16), (18, 255)]));
    }

    #[test]
    fn tcp_and_udp_in_one_rule_match_nothing() {
        let rs = parse_rules("chain input {\n tcp dport 1 udp sport 2 accept\n}", "x").unwrap();
        assert_eq!(rs.chain(Chain::Input).rules[0].proto, Some(vec![]));
    }

    #[test]
    fn garbage_never_panics() {
        for s in [
            "",
            "{",
            "}",
            "chain",
            "chain forward",
            "chain forward {",
            "define",
            "define x =",
            "set x {",
            "ct",
            "ct size",
            "ct size 1",
            "limit reject x",
            "\"",
            "chain forward { tcp flags / }",
            "chain forward { ip saddr { } accept }",
            "chain forward { ip }",
            "chain forward { reject with icmp }",
        ] {
            assert!(parse_rules(s, "g").is_err() || s.is_empty(), "{s:?}");
        }
    }
}
