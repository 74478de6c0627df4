//! Observability for ustack: time, MIB counters with Linux's names and their renderings,
//! drop reasons, and the pcap writer. Depends on no other ustack crate.
//!
//! - [`mib`]: [`Counter`] (every counter of Linux's `/proc/net/snmp` and `/proc/net/netstat`,
//!   same names and order) and [`Mib`], their storage, rendered like those files or, with the
//!   `json` feature (serde_json; off by default, so the stack's graph has no serde), as JSON.
//! - [`drop`](mod@drop): [`DropReason`], why a packet was dropped, and which counters that bumps.
//! - [`pcap`]: [`PcapWriter`], classic pcap files for tcpdump and tshark.
//! - [`time`]: [`Instant`], the caller's clock.
//! - [`profile`]: where a shard's loop spends its time, sampled per stage.
//!
//! Counting and rendering, as `/proc/net/snmp` shows it (a header line of names, then a
//! line of values, per group):
//!
//! ```
//! use ustack_obs::{Counter, Mib};
//!
//! let mut mib = Mib::new();
//! mib.inc(Counter::UdpInDatagrams);
//! mib.add(Counter::UdpInDatagrams, 2);
//! assert_eq!(mib.get(Counter::UdpInDatagrams), 3);
//! let snmp = mib.render_snmp();
//! let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
//! assert!(udp.next().unwrap().starts_with("Udp: InDatagrams NoPorts"));
//! assert!(udp.next().unwrap().starts_with("Udp: 3 0"));
//! ```

pub mod drop;
pub mod mib;
pub mod pcap;
pub mod profile;
pub mod time;

pub use drop::DropReason;
pub use mib::{Counter, Kind, Mib, ProcFile, Table};
pub use pcap::{LinkType, PcapWriter};
pub use time::Instant;
