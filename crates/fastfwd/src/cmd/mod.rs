//! One module per subcommand.

pub mod capture;
pub mod config;
pub mod fib;
pub mod firewall;
pub mod lab;
pub mod neighbor;
pub mod replay;
pub mod route;
pub mod run;
pub mod show;
pub mod trace;
