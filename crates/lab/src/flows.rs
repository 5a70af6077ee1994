//! flows
