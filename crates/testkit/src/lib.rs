//! Test helpers for ustack.
