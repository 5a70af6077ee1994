//! topo
