//! A writer of classic pcap files (tcpdump's format), readable by tcpdump, tshark, Wireshark.
//!
//! Format (<https://www.tcpdump.org/manpages/pcap-savefile.5.html>, and
//! draft-ietf-opsawg-pcap): a 24-byte file header, then per packet a 16-byte record header and
//! the captured bytes. We write microsecond timestamps (magic `0xa1b2c3d4`), version 2.4, in
//! little-endian byte order (readers detect the order from the magic). A packet longer than the
//! snapshot length is truncated to it; the record keeps its original length.
//!
//! The writer does no buffering of its own: wrap a file in a `std::io::BufWriter`.

use std::io::{self, Write};

use crate::time::Instant;

/// The pcap magic number for microsecond timestamps.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// The format version written: 2.4, the only one in use.
pub const VERSION: (u16, u16) = (2, 4);
/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of each packet record's header.
pub const RECORD_HEADER_LEN: usize = 16;
/// The snapshot length used when 0 is given: tcpdump's `MAXIMUM_SNAPLEN`.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// What the captured bytes start with (the pcap `LINKTYPE_*` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II frames, starting with the destination MAC.
    Ethernet = 1,
    /// `LINKTYPE_RAW` (101): bare IPv4/IPv6 packets (a TUN device), version from the first nibble.
    Raw = 101,
}

impl LinkType {
    /// The `LINKTYPE_*` number written in the file header.
    pub const fn value(self) -> u32 {
        self as u32
    }
}

/// Writes packets to `W` in classic pcap format.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    link_type: LinkType,
    snaplen: u32,
    packets: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Write the 24-byte file header to `out` and return the writer. `snaplen` is the most
    /// bytes kept of each packet; 0 means [`DEFAULT_SNAPLEN`].
    pub fn new(mut out: W, link_type: LinkType, snaplen: u32) -> io::Result<Self> {
        let snaplen = if snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            snaplen
        };
        let mut header = [0u8; FILE_HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        header[4..6].copy_from_slice(&VERSION.0.to_le_bytes());
        header[6..8].copy_from_slice(&VERSION.1.to_le_bytes());
        // 8..12 thiszone (GMT offset) and 12..16 sigfigs: 0, as every writer does.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&link_type.value().to_le_bytes());
        out.write_all(&header)?;
        Ok(PcapWriter {
            out,
            link_type,
            snaplen,
            packets: 0,
        })
    }

    /// Append one packet captured at `ts`: a record header (seconds and microseconds since the
    /// clock's epoch, captured length, original length) and the first `snaplen` bytes of
    /// `frame`. Seconds are 32 bits in this format: they wrap after 2^32 s (136 years).
    pub fn write_packet(&mut self, ts: Instant, frame: &[u8]) -> io::Result<()> {
        let since = ts.since_epoch();
        let secs = (since.as_secs() & u64::from(u32::MAX)) as u32;
        let micros = since.subsec_micros();
        let orig_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl_len = orig_len.min(self.snaplen);
        let mut header = [0u8; RECORD_HEADER_LEN];
        header[0..4].copy_from_slice(&secs.to_le_bytes());
        header[4..8].copy_from_slice(&micros.to_le_bytes());
        header[8..12].copy_from_slice(&incl_len.to_le_bytes());
        header[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&header)?;
        // incl_len <= frame.len(), so this slice is in bounds.
        self.out.write_all(&frame[..incl_len as usize])?;
        self.packets += 1;
        Ok(())
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The link type written in the file header.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// The snapshot length written in the file header.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying writer, mutably (writing to it directly corrupts the file).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Give back the underlying writer (not flushed: call [`flush`](PcapWriter::flush) first
    /// if it buffers).
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The records of a pcap stream as [`PcapWriter`] writes it (little-endian, microseconds),
/// checking its structure: `None` if it does not start with that file header or ends
/// inside a record.
pub fn count_records(data: &[u8]) -> Option<u64> {
    if data.len() < FILE_HEADER_LEN || data[..4] != MAGIC_MICROS.to_le_bytes() {
        return None;
    }
    let (mut at, mut n) = (FILE_HEADER_LEN, 0);
    while at < data.len() {
        let incl = u32::from_le_bytes(data.get(at + 8..at + 12)?.try_into().ok()?) as usize;
        at += RECORD_HEADER_LEN + incl;
        n += 1;
    }
    (at == data.len()).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_counted_and_truncation_is_caught() {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Raw, 100).unwrap();
        w.write_packet(Instant::ZERO, &[0; 60]).unwrap();
        w.write_packet(Instant::ZERO, &[0; 1500]).unwrap();
        let pcap = w.into_inner();
        assert_eq!(pcap.len(), FILE_HEADER_LEN + 2 * RECORD_HEADER_LEN + 160);
        assert_eq!(count_records(&pcap), Some(2));
        assert_eq!(count_records(&pcap[..pcap.len() - 1]), None);
        assert_eq!(count_records(b"not a pcap file at all, no"), None);
    }

    #[test]
    fn snaplen_zero_means_default() {
        let w = PcapWriter::new(Vec::new(), LinkType::Raw, 0).unwrap();
        assert_eq!(w.snaplen(), DEFAULT_SNAPLEN);
        assert_eq!(&w.get_ref()[16..20], &DEFAULT_SNAPLEN.to_le_bytes());
        assert_eq!(&w.get_ref()[20..24], &101u32.to_le_bytes());
    }

    #[test]
    fn timestamp_split_into_seconds_and_micros() {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, 65535).unwrap();
        // 3.000_456_999 s: the sub-microsecond part is dropped, not rounded.
        w.write_packet(Instant::from_nanos(3_000_456_999), &[])
            .unwrap();
        let rec = &w.get_ref()[FILE_HEADER_LEN..];
        assert_eq!(rec, &[3, 0, 0, 0, 0xc8, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w.packets(), 1);
    }
}
