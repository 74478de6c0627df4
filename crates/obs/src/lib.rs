//! Observability for ustack: time, MIB counters with Linux's names and their renderings,
//! drop reasons, and the pcap writer. Depends on no other ustack crate.

pub mod time;

pub use time::Instant;
