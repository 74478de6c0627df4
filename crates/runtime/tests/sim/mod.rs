//! What the tests of the public API over a sim pair share: two runtimes on one virtual
//! clock, run in turn until a condition holds.

use core::time::Duration;

use ustack_runtime::runtime::{Clock, Runtime, SimPort, VirtualClock};

/// A runtime on one end of a sim link, on a virtual clock.
pub type Rt = Runtime<SimPort, VirtualClock>;

/// Run both runtimes until `done` holds (at most 10 s of virtual time).
pub fn run_until(
    srt: &mut Rt,
    crt: &mut Rt,
    clock: &VirtualClock,
    mut done: impl FnMut(&mut Rt, &mut Rt) -> bool,
) {
    let limit = clock.now() + Duration::from_secs(10);
    while !done(srt, crt) {
        srt.run_once(Some(Duration::from_millis(1))).unwrap();
        crt.run_once(Some(Duration::from_millis(1))).unwrap();
        assert!(clock.now() < limit, "not done in 10 s of virtual time");
    }
}
