//! fastfwd's routing information base: everything a route can come from
//! and the one decision over it, with no I/O.
//!
//! - [`kernel`]: the kernel's routing state, mirrored from the
//!   [`event`]s the netlink reader decodes (links, addresses, the routes
//!   of every table but local, policy [`rule`]s, nexthop objects,
//!   neighbours);
//! - the config file's and the control socket's static routes, whose next
//!   hops are checked and placed by the one resolver, [`hop::resolve`];
//! - [`decide::best`]: the route fastfwd installs for a prefix of a table,
//!   from those sources in one order of precedence (control socket, config,
//!   connected subnet, the kernel's lowest metric). Both the full build and
//!   the incremental update ask it, for every prefix they install, and so
//!   does the compiler of the tables the policy rules look up.
//!
//! Its consumers compile the decisions: the user-space tables (FIB writer
//! and tables builder, `control`) and from those the XDP engine's image.

pub mod decide;
pub mod event;
pub mod hop;
pub mod kernel;
pub mod rule;

pub use decide::{Decision, Interfaces, Origin, Statics, best};
pub use hop::{HopError, NamedHop};
