//! `capture`: wrap any [`Device`] and write every frame in and out to a pcap file.
//!
//! [`Capture`] sits between the stack's poll loop and a device. Each frame the device
//! delivers (`recv` returning `Some`) and each frame it accepts for transmission (`send`
//! returning `true`) is written with the caller's `now` as its timestamp. The link type is
//! `LINKTYPE_ETHERNET` for [`Medium::Ethernet`] and `LINKTYPE_RAW` for [`Medium::Ip`].
//!
//! Outgoing frames are tapped where Linux taps them for `tcpdump` (`dev_queue_xmit_nit`,
//! called from `xmit_one` in `net/core/dev.c`): when the device takes the frame. A frame the
//! device refuses (queue full, too big) is not captured; the device counts it. A batch
//! ([`Device::send_batch`]) goes to the device whole, so that a device which merges a
//! batch's frames (the TUN queue's GSO) still does, and is captured frame by frame after
//! it. When the device says it has room for fewer frames than the batch
//! ([`Device::tx_space`]), the batch goes frame by frame instead (each with its
//! `xmit_more` hint, so the device still publishes its ring and rings its doorbell once),
//! and exactly the frames it took are captured. A frame refused from a whole batch for
//! another reason (too big, a failed write) is in the capture all the same, which one
//! being unknown ([`Capture::batch_refused`] counts them): there the capture is Linux's,
//! whose tap runs before the driver's `ndo_start_xmit`.
//!
//! A snapshot length ([`Capture::with_snaplen`]) keeps only the first bytes of each frame
//! (the headers, say), and a limit ([`Capture::limit`], `tcpdump -c`) only the first
//! frames, so that the capture of a long transfer stays small.
//!
//! Capturing never changes the traffic: a failed write is counted in
//! [`Capture::write_errors`] and the frame goes through (or was received) regardless.
//!
//! ```
//! use ustack_dev::capture::Capture;
//! use ustack_dev::sim::{Side, SimLink, SimLinkConfig};
//! use ustack_dev::Device;
//! use ustack_obs::time::Instant;
//!
//! let mut link = SimLink::new(SimLinkConfig::default());
//! let mut port = Capture::new(link.port(Side::A), Vec::new()).unwrap();
//! assert!(port.send(Instant::from_millis(1), &[0u8; 60]));
//! let (_, writer) = port.into_parts();
//! let pcap = writer.into_inner();
//! assert_eq!(pcap.len(), 24 + 16 + 60); // global header, record header, frame
//! ```

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ustack_obs::pcap::{DEFAULT_SNAPLEN, LinkType, PcapWriter};
use ustack_obs::time::Instant;

use crate::{Device, DeviceCaps, Medium};

/// The pcap link type for a medium.
pub const fn link_type(medium: Medium) -> LinkType {
    match medium {
        Medium::Ethernet => LinkType::Ethernet,
        Medium::Ip => LinkType::Raw,
    }
}

/// A device whose frames, in and out, are also written to a pcap stream.
#[derive(Debug)]
pub struct Capture<D: Device, W: Write> {
    device: D,
    pcap: PcapWriter<W>,
    packets_written: u64,
    write_errors: u64,
    batch_refused: u64,
    limit: u64,
    not_captured: u64,
}

impl<D: Device, W: Write> Capture<D, W> {
    /// Wrap `device`, writing the pcap global header to `out` now (the link type follows
    /// the device's medium; frames are captured whole up to [`DEFAULT_SNAPLEN`] bytes,
    /// tcpdump's default). Fails only if that header cannot be written.
    pub fn new(device: D, out: W) -> io::Result<Self> {
        Self::with_snaplen(device, out, DEFAULT_SNAPLEN)
    }

    /// [`new`](Self::new), keeping at most `snaplen` bytes of each frame (0:
    /// [`DEFAULT_SNAPLEN`]); each record still carries the frame's whole length.
    pub fn with_snaplen(device: D, out: W, snaplen: u32) -> io::Result<Self> {
        let pcap = PcapWriter::new(out, link_type(device.caps().medium), snaplen)?;
        Ok(Self::with_writer(device, pcap))
    }

    /// Wrap `device` with an existing pcap writer (whose link type should match the
    /// device's medium, see [`link_type`]).
    pub fn with_writer(device: D, pcap: PcapWriter<W>) -> Self {
        Capture {
            device,
            pcap,
            packets_written: 0,
            write_errors: 0,
            batch_refused: 0,
            limit: u64::MAX,
            not_captured: 0,
        }
    }

    /// Capture only the first `frames` frames; the rest go through uncaptured (counted in
    /// [`not_captured`](Self::not_captured)).
    pub fn limit(mut self, frames: u64) -> Self {
        self.limit = frames;
        self
    }

    /// Frames that went through after the [`limit`](Self::limit), uncaptured.
    pub fn not_captured(&self) -> u64 {
        self.not_captured
    }

    /// Frames written to the pcap stream so far.
    pub fn packets_written(&self) -> u64 {
        self.packets_written
    }

    /// Frames that could not be written (the traffic was not affected).
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// Frames the device refused from batches it took whole: captured all the same (see
    /// the module's documentation).
    pub fn batch_refused(&self) -> u64 {
        self.batch_refused
    }

    /// The wrapped device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The wrapped device, mutably (frames moved through it directly are not captured).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Flush the pcap stream; a failure is counted in [`write_errors`](Self::write_errors)
    /// and returned.
    pub fn flush(&mut self) -> io::Result<()> {
        self.pcap.flush().inspect_err(|_| self.write_errors += 1)
    }

    /// Unwrap into the device and the pcap writer (call `flush` or `into_inner` on the
    /// writer to get the stream back).
    pub fn into_parts(self) -> (D, PcapWriter<W>) {
        (self.device, self.pcap)
    }

    fn write(&mut self, now: Instant, frame: &[u8]) {
        if self.packets_written + self.write_errors >= self.limit {
            self.not_captured += 1;
            return;
        }
        match self.pcap.write_packet(now, frame) {
            Ok(()) => self.packets_written += 1,
            Err(_) => self.write_errors += 1,
        }
    }
}

impl<D: Device, W: Write> Device for Capture<D, W> {
    fn caps(&self) -> DeviceCaps {
        self.device.caps()
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let n = self.device.recv(now, buf)?;
        self.write(now, &buf[..n]);
        Some(n)
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    /// Passes the hint on, and captures the frame if the device took it.
    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        let accepted = self.device.send_more(now, frame, more);
        if accepted {
            self.write(now, frame);
        }
        accepted
    }

    /// Whole to the device, then every frame captured; frame by frame (as
    /// [`send_more`](Device::send_more)) if the device has room for fewer.
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        if self
            .device
            .tx_space()
            .is_some_and(|room| room < frames.len())
        {
            return crate::send_each(self, now, frames);
        }
        let refused = self.device.send_batch(now, frames);
        self.batch_refused += refused as u64;
        for frame in frames {
            self.write(now, frame);
        }
        refused
    }

    fn tx_space(&mut self) -> Option<usize> {
        self.device.tx_space()
    }
    fn tx_direct(&self) -> bool {
        self.device.tx_direct()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.device.poll_at()
    }

    /// Passed on; `trust_rx_csum` is not, so that the frames captured carry whole
    /// checksums.
    fn rx_csum_unnecessary(&self) -> bool {
        self.device.rx_csum_unnecessary()
    }
}

/// The switch and queue of one or more [`Tap`]s: capture from a running server
/// (`ustack capture`), on and off at will.
///
/// Off, a tap costs one relaxed atomic load per frame. On, every frame in and out is
/// copied with its wall-clock time into a queue that another thread drains with
/// [`take`](Self::take); the queue holds at most `limit` frames, and frames beyond it are
/// counted in [`dropped`](Self::dropped), not captured (a slow reader never slows the
/// stack down, as `tcpdump` drops rather than blocks: `ps_drop`).
#[derive(Debug)]
pub struct TapSwitch {
    on: AtomicBool,
    frames: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    limit: usize,
    dropped: AtomicU64,
}

impl TapSwitch {
    /// A switch, off, whose queue holds at most `limit` frames.
    pub fn new(limit: usize) -> Arc<TapSwitch> {
        Arc::new(TapSwitch {
            on: AtomicBool::new(false),
            frames: Mutex::new(VecDeque::new()),
            limit,
            dropped: AtomicU64::new(0),
        })
    }

    /// Start or stop capturing. Stopping drops what was not taken yet.
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::Release);
        if !on {
            self.lock().clear();
        }
    }

    /// Whether the taps capture.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Take every frame captured so far: (wall-clock time as an [`Instant`] since the Unix
    /// epoch, the frame).
    pub fn take(&self) -> Vec<(Instant, Vec<u8>)> {
        self.lock().drain(..).collect()
    }

    /// Frames not captured because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Vec<u8>)>> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, frame: &[u8]) {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut q = self.lock();
        if q.len() >= self.limit {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back((Instant::from_nanos(wall.as_nanos() as u64), frame.to_vec()));
    }
}

/// A device with a [`TapSwitch`]: frames in (delivered by the device) and out (accepted by
/// it) go to the switch's queue while it is on, tapped where [`Capture`] taps them.
#[derive(Debug)]
pub struct Tap<D: Device> {
    device: D,
    switch: Arc<TapSwitch>,
}

impl<D: Device> Tap<D> {
    /// Tap `device` through `switch` (several taps may share one switch: the queues of a
    /// sharded server).
    pub fn new(device: D, switch: Arc<TapSwitch>) -> Tap<D> {
        Tap { device, switch }
    }

    /// The tapped device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The tapped device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }
}

impl<D: Device> Device for Tap<D> {
    fn caps(&self) -> DeviceCaps {
        self.device.caps()
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let n = self.device.recv(now, buf)?;
        if self.switch.is_on() {
            self.switch.push(&buf[..n]);
        }
        Some(n)
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        let accepted = self.device.send_more(now, frame, more);
        if accepted && self.switch.is_on() {
            self.switch.push(frame);
        }
        accepted
    }

    /// Off, the batch goes to the device whole; on, frame by frame (with the `xmit_more`
    /// hint) so that each accepted frame is captured.
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        if self.switch.is_on() {
            crate::send_each(self, now, frames)
        } else {
            self.device.send_batch(now, frames)
        }
    }

    fn tx_space(&mut self) -> Option<usize> {
        self.device.tx_space()
    }
    fn tx_direct(&self) -> bool {
        self.device.tx_direct()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.device.poll_at()
    }

    /// Passed on; `trust_rx_csum` is not, so that the frames captured carry whole
    /// checksums.
    fn rx_csum_unnecessary(&self) -> bool {
        self.device.rx_csum_unnecessary()
    }
}
