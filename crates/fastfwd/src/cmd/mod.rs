//! One module per subcommand.

pub mod fib;
pub mod firewall;
pub mod lab;
pub mod replay;
