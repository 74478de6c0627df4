//! Devices (links) for ustack.
