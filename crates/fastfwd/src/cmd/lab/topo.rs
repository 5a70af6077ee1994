//! `fastfwd lab topo up|down|status`.

use clap::{Args as ClapArgs, Subcommand};
use lab::topo::{FirewallPreset, Placement, TopoConfig, Topology};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum Command {
    /// Create the namespaces (replacing a stale lab of the same tag).
    Up(UpArgs),
    /// Remove the namespaces (only ones this lab created).
    Down(TagArgs),
    /// Show what exists.
    Status(TagArgs),
}

#[derive(ClapArgs)]
pub struct TagArgs {
    /// Name tag: namespaces are fflab-TAG-gen, -dut, -sink.
    #[arg(long, default_value = "lab")]
    pub tag: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Topology options shared by every command that may bring a lab up.
#[derive(ClapArgs, Clone)]
pub struct TopoOpts {
    /// Use ARP/ND instead of static neighbour entries.
    #[arg(long)]
    pub dynamic_neighbours: bool,
    /// Leave the kernel's forwarding off in dut.
    #[arg(long)]
    pub no_forwarding: bool,
    /// nftables preset in dut: `none`, `linear N`, `set N`.
    #[arg(long, default_value = "none")]
    pub firewall: String,
    /// Core for the generator (default 0 on two or more cores).
    #[arg(long)]
    pub gen_cpu: Option<usize>,
    /// Core for the forwarding (d0's NAPI thread; default 1).
    #[arg(long)]
    pub fwd_cpu: Option<usize>,
    /// Core for the receiver (default 0).
    #[arg(long)]
    pub sink_cpu: Option<usize>,
    /// Keep d0's NAPI unthreaded (forwarding then runs in the generator's context).
    #[arg(long)]
    pub no_napi_thread: bool,
}

impl TopoOpts {
    pub fn config(&self, tag: &str) -> anyhow::Result<TopoConfig> {
        let mut c = TopoConfig::new(tag);
        c.static_neighbours = !self.dynamic_neighbours;
        c.forwarding = !self.no_forwarding;
        c.firewall = FirewallPreset::parse(&self.firewall)?;
        let d = Placement::two_core_default();
        c.placement = Placement {
            gen_cpu: self.gen_cpu.or(d.gen_cpu),
            fwd_cpu: self.fwd_cpu.or(d.fwd_cpu),
            sink_cpu: self.sink_cpu.or(d.sink_cpu),
            napi_threaded: !self.no_napi_thread,
        };
        Ok(c)
    }
}

#[derive(ClapArgs)]
pub struct UpArgs {
    #[command(flatten)]
    pub tag: TagArgs,
    #[command(flatten)]
    pub opts: TopoOpts,
    /// Load the full routing table into dut's FIB (prefix list, .gz ok).
    #[arg(long)]
    pub full_table: bool,
    /// The prefix list for --full-table.
    #[arg(long)]
    pub table_file: Option<PathBuf>,
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    super::need_root()?;
    match cmd {
        Command::Up(a) => {
            let cfg = a.opts.config(&a.tag.tag)?;
            let topo = Topology::up(&cfg)?;
            let fib = if a.full_table {
                let path = a.table_file.unwrap_or_else(super::default_full_table);
                match topo.load_full_table(&path) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        let _ = topo.down();
                        return Err(e.into());
                    }
                }
            } else {
                None
            };
            if a.tag.json {
                super::print_json(
                    &serde_json::json!({"topology": topo, "config": cfg, "full_table": fib}),
                )?;
            } else {
                println!(
                    "lab {} up: {} -> {} -> {}",
                    topo.tag, topo.gen_ns, topo.dut_ns, topo.sink_ns
                );
                println!(
                    "  placement: {:?}; d0 NAPI thread pid {:?}",
                    topo.placement, topo.napi_pid
                );
                println!(
                    "  forwarding {}, firewall {}",
                    if cfg.forwarding { "on" } else { "off" },
                    cfg.firewall.label()
                );
                if let Some(l) = fib {
                    println!(
                        "  full table: {} IPv4 + {} IPv6 routes over {} next hops in {:.1} s ({} skipped)",
                        l.routes_v4, l.routes_v6, l.next_hops, l.seconds, l.skipped
                    );
                }
            }
        }
        Command::Down(a) => {
            Topology::named(&a.tag).down()?;
            if a.json {
                super::print_json(&serde_json::json!({"tag": a.tag, "down": true}))?;
            } else {
                println!("lab {} down", a.tag);
            }
        }
        Command::Status(a) => {
            let st = Topology::named(&a.tag).status();
            if a.json {
                super::print_json(&st)?;
            } else {
                println!("lab {}: {}", st.tag, if st.up { "up" } else { "not up" });
                for n in &st.namespaces {
                    println!("  {:<24} exists {:<5} ours {}", n.name, n.exists, n.ours);
                }
                if st.up {
                    println!(
                        "  forwarding {:?}, nft drop rules {:?}, routes v4 {:?} v6 {:?}, d0 threaded {:?}",
                        st.forwarding, st.nft_rules, st.routes_v4, st.routes_v6, st.d0_threaded
                    );
                }
            }
        }
    }
    Ok(())
}
