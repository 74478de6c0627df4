//! [`Net`] behind the control socket (feature `control`): `ustack stat`, `ss` and
//! `sysctl` on a program whose stack is a `Net` (libustack_preload.so's `USTACK_CONTROL`),
//! through the same server as `ustack serve` ([`ustack_runtime::control`]). Each read is a
//! job on the shard's loop thread between two rounds; the loop threads always answer, so
//! the timeout is not needed.

use core::time::Duration;
use std::io;
use std::sync::Arc;

use ustack_runtime::control::Inspect;
use ustack_stack::inspect::MemoryUsage;
use ustack_stack::{Instant, Stack};

use crate::core::Net;

impl Inspect for Net {
    fn shards(&self) -> usize {
        Net::shards(self)
    }

    fn mib(&self, _timeout: Duration) -> io::Result<ustack_obs::Mib> {
        let all = self.on_each_shard(|rt| rt.stack().mib().clone())?;
        let mut sum = ustack_obs::Mib::new();
        for m in &all {
            sum.merge(m);
        }
        Ok(sum)
    }

    fn memory(&self, _timeout: Duration) -> io::Result<Vec<MemoryUsage>> {
        self.on_each_shard(|rt| rt.memory())
    }

    fn on_each_stack<T, F>(&self, f: F, _timeout: Duration) -> io::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &mut Stack, Instant) -> T + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        (0..self.shards())
            .map(|k| {
                let f = f.clone();
                self.call(k, move |ctx| {
                    let now = ctx.rt.now();
                    f(k, ctx.rt.stack_mut(), now)
                })
            })
            .collect()
    }
}
