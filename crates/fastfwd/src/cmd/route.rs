//! `fastfwd route add|del`: routes held by the daemon beside the kernel's
//! and the config file's (iproute2 words).

use super::show::{ClientOpts, ask_as};
use anyhow::{Result, bail};
use control::protocol::{HopSpec, Request, reply};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// `route add PREFIX via GW [dev IF]`, or several `nexthop via GW dev IF` (ECMP).
    Add {
        /// Destination prefix.
        prefix: String,
        /// `via GW`, `dev IF`, `nexthop via GW dev IF …`.
        words: Vec<String>,
    },
    /// `route del PREFIX`.
    Del {
        /// Destination prefix.
        prefix: String,
    },
}

/// Parses `via GW dev IF nexthop via GW2 …` into next hops.
pub fn parse_hops(words: &[String]) -> Result<Vec<HopSpec>> {
    let mut hops = vec![HopSpec {
        via: None,
        dev: None,
    }];
    let mut it = words.iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "nexthop" => {
                if hops
                    .last()
                    .is_some_and(|h| h.via.is_some() || h.dev.is_some())
                {
                    hops.push(HopSpec {
                        via: None,
                        dev: None,
                    });
                }
            }
            "via" | "dev" => {
                let Some(v) = it.next() else {
                    bail!("{w} needs a value")
                };
                let h = hops.last_mut().expect("hops starts non-empty");
                if w == "via" {
                    h.via = Some(v.clone());
                } else {
                    h.dev = Some(v.clone());
                }
            }
            other => bail!("unexpected word {other:?} (expected via, dev or nexthop)"),
        }
    }
    hops.retain(|h| h.via.is_some() || h.dev.is_some());
    if hops.is_empty() {
        bail!("a route needs `via GW` and/or `dev IF`");
    }
    Ok(hops)
}

pub fn run(a: Args) -> Result<()> {
    let req = match a.cmd {
        Cmd::Add { prefix, words } => Request::RouteAdd {
            prefix,
            next_hops: parse_hops(&words)?,
        },
        Cmd::Del { prefix } => Request::RouteDel { prefix },
    };
    let v: reply::Applied = ask_as(&a.opts.socket, &req)?;
    if a.opts.json {
        println!("{}", serde_json::to_string(&v)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn iproute2_words() {
        assert_eq!(
            parse_hops(&w("via 1.2.3.4")).unwrap(),
            vec![HopSpec {
                via: Some("1.2.3.4".into()),
                dev: None
            }]
        );
        let h = parse_hops(&w("nexthop via 1.1.1.1 dev d1 nexthop via 2.2.2.2")).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].dev.as_deref(), Some("d1"));
        assert!(parse_hops(&w("")).is_err());
        assert!(parse_hops(&w("via")).is_err());
        assert!(parse_hops(&w("gateway 1.1.1.1")).is_err());
    }
}
