//! fastfwd's configuration file (TOML): interfaces, VLAN sub-interfaces,
//! static routes (ECMP) and static neighbours.
//!
//! A configuration applies whole or not at all: [`Config::load`] parses and
//! validates everything and returns either a [`Config`] in which every
//! reference is resolved, or a [`ConfigError`] listing every problem with
//! its file, line and field:
//!
//! ```text
//! router.toml:12: routes[3].via: 10.9.9.9 is not on any connected subnet
//! ```
//!
//! The runtime tables of the pipeline are built only from a validated
//! [`Config`]. The format is documented in `docs/config.md`.

#![forbid(unsafe_code)]

mod error;
pub mod file;
pub mod hop;
mod model;
mod raw;
mod runtime;
mod validate;

pub use error::{ConfigError, Diagnostic, ErrorKind};
pub use model::{
    FirewallConfig, Interface, Ipv4IfAddr, Ipv6IfAddr, MacAddr, Neighbour, NextHop, ParseMacError,
    Route,
};
pub use runtime::{ConfigAcl, FIREWALL_SEED, is_router_address};
pub use validate::{DEFAULT_MTU, MAX_MTU, MAX_NEXT_HOPS, MIN_MTU, MIN_MTU_V6};

use std::path::Path;

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, as named to the loader.
    pub file: String,
    /// Logical interfaces: each port followed by its VLAN sub-interfaces,
    /// in file order.
    pub interfaces: Vec<Interface>,
    /// Static routes, in file order.
    pub routes: Vec<Route>,
    /// Static neighbours, in file order.
    pub neighbours: Vec<Neighbour>,
    /// The `[firewall]` section: rules parsed and compiled.
    pub firewall: Option<FirewallConfig>,
    /// The `[workers]` section, reserved, carried unparsed.
    pub workers: Option<toml::Value>,
    /// The `[io]` section, reserved, carried unparsed.
    pub io: Option<toml::Value>,
}

impl Config {
    /// Reads, parses and validates a configuration file (a regular file
    /// of at most [`file::MAX_FILE_BYTES`], as its rules file).
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Config::load_from(path.as_ref(), None)
    }

    /// [`Config::load`] for a file a control client named: it and its
    /// rules file must lie under `root` (the running configuration's
    /// directory), symbolic links resolved.
    pub fn load_within(path: impl AsRef<Path>, root: &Path) -> Result<Config, ConfigError> {
        Config::load_from(path.as_ref(), Some(root))
    }

    fn load_from(path: &Path, root: Option<&Path>) -> Result<Config, ConfigError> {
        let io = |source| ConfigError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(root) = root {
            file::confined(path, root).map_err(io)?;
        }
        let text = file::read_text_file(path).map_err(io)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        Config::parse_confined(&name, &text, dir, root)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    /// A firewall rules file is looked for relative to the current directory.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        Config::parse_in(file, text, Path::new("."))
    }

    /// Parses and validates configuration text; `file` names it in errors,
    /// `dir` is where relative paths in it (the firewall's `file`) start.
    pub fn parse_in(file: &str, text: &str, dir: &Path) -> Result<Config, ConfigError> {
        Config::parse_confined(file, text, dir, None)
    }

    fn parse_confined(
        file: &str,
        text: &str,
        dir: &Path,
        root: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        let lines = error::LineIndex::new(text);
        let raw: raw::RawConfig = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                let offset = e.span().map(|s| s.start).unwrap_or(0);
                let (line, column) = lines.line_col(offset);
                // Valid TOML that does not fit the schema: find the field
                // the error points at. Invalid TOML: a syntax error.
                // One line per problem: the parser's messages may span several.
                let message = e.message().trim().replace('\n', "; ");
                let (field, kind) = match toml::from_str::<raw::Node>(text) {
                    Ok(root) => (root.path_at(offset), ErrorKind::Schema(message)),
                    Err(_) => (String::new(), ErrorKind::Syntax(message)),
                };
                return Err(ConfigError::Invalid(vec![Diagnostic {
                    file: file.to_owned(),
                    line,
                    column,
                    field,
                    kind,
                }]));
            }
        };
        validate::validate(file, text, raw, dir, root).map_err(ConfigError::Invalid)
    }

    /// The interface called `name`.
    pub fn interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// The distinct ports (kernel interfaces), in file order.
    pub fn ports(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for i in &self.interfaces {
            if !out.contains(&i.port.as_str()) {
                out.push(&i.port);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
