//! recv
