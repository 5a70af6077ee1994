//! ministat
