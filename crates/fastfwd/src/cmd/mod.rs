//! One module per subcommand.

pub mod fib;
pub mod firewall;
pub mod lab;
pub mod replay;
pub mod config;
pub mod neighbor;
pub mod route;
pub mod run;
pub mod show;
