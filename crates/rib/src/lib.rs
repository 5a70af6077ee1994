//! fastfwd's routing information base: everything a route can come from,
//! the one decision over it, and the compiler of the user-space tables,
//! with no I/O.
//!
//! - [`kernel`]: the kernel's routing state, mirrored from the
//!   [`event`]s the netlink reader decodes (links, addresses, the routes
//!   of every table but local, policy [`rule`]s, nexthop objects,
//!   neighbours);
//! - the config file's and the control socket's static routes, whose next
//!   hops are checked and placed by the one resolver,
//!   [`config::hop::resolve`];
//! - [`decide::best`]: the route fastfwd installs for a prefix of a table,
//!   from those sources in one order of precedence (control socket, config,
//!   connected subnet, the kernel's lowest metric). Both the full build and
//!   the incremental update ask it, for every prefix they install, and so
//!   does the compiler of the tables the policy rules look up;
//! - the compiler of those decisions into the user-space tables both
//!   engines start from: [`state::RouterState::build`] (every prefix),
//!   [`router::Router`] (the changed prefixes, written into the FIBs as
//!   they change), [`policy`] (the rules and the tables they look up);
//!   the result is published as a [`snapshot::Snapshot`], which the XDP
//!   engine's compiler (`xdp::compile`) turns into its maps.
//!
//! The route path reads one way: `control::netlink` decodes, this crate
//! decides and compiles, `xdp` compiles again for the kernel.

pub mod decide;
pub mod event;
pub mod kernel;
pub mod policy;
pub mod router;
pub mod rule;
pub mod snapshot;
pub mod state;

pub use decide::{Decision, Interfaces, Origin, Statics, best};
pub use router::{Router, RouterTables};
pub use state::{Built, RouterState};

/// The merged sources could not be built into tables (a config interface
/// the pipeline refuses, a route it cannot hold, an input chain the
/// engines cannot enforce); the text names which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("building tables: {0}")]
pub struct BuildError(pub String);
