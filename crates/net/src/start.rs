//! Starting a [`Net`] over the links the runtime supports: a sim pair (tests), shm queue
//! pairs (one shard each), TUN queues, or any [`Link`]. Each shard's runtime is built by
//! the caller's [`RuntimeBuilder`] (its address, sysctls, seed), on the loop thread that
//! runs it.

use std::io;

use ustack_dev::shm::ShmPort;
use ustack_dev::sim::SimLinkConfig;
use ustack_dev::tun::TunQueue;
use ustack_runtime::runtime::{RuntimeBuilder, sim_pair};

use crate::core::{Build, MemberSpec, Net, default_rss, spawn_loop};
use crate::link::{DynLink, Link};

impl Net {
    /// Two stacks on the two ends of an in-process sim link (`a` on side A, `b` on side
    /// B), both run by one loop thread on the real clock: for tests and examples.
    pub fn sim_pair(
        a: RuntimeBuilder,
        b: RuntimeBuilder,
        link: SimLinkConfig,
    ) -> io::Result<(Net, Net)> {
        let build: Build = Box::new(move || {
            let (pa, pb) = sim_pair(link);
            Ok(vec![a.build(DynLink::new(pa))?, b.build(DynLink::new(pb))?])
        });
        let (thread, queues) = spawn_loop(
            "ustack-net-sim".into(),
            build,
            vec![member(0, 1), member(0, 1)],
        )?;
        let mut queues = queues.into_iter();
        match (queues.next(), queues.next()) {
            (Some(qa), Some(qb)) => Ok((
                Net::from_parts(vec![thread.clone()], vec![qa]),
                Net::from_parts(vec![thread], vec![qb]),
            )),
            _ => Err(io::Error::other("sim pair: missing queues")),
        }
    }

    /// A stack over shm queue pairs: one shard per port, each on its own loop thread,
    /// flows steered by RSS ([`RssKey::MICROSOFT`](ustack_runtime::RssKey::MICROSOFT)).
    pub fn shm(builder: RuntimeBuilder, ports: Vec<ShmPort>) -> io::Result<Net> {
        Net::on_links(builder, ports)
    }

    /// A stack over TUN queues (one shard per queue).
    pub fn tun(builder: RuntimeBuilder, queues: Vec<TunQueue>) -> io::Result<Net> {
        Net::on_links(builder, queues)
    }

    /// A stack over any links, one shard (and loop thread) per link; shard `k` is built by
    /// `builder.shard(k)`. `InvalidInput` for no link.
    pub fn on_links<L: Link + Send + 'static>(
        builder: RuntimeBuilder,
        links: Vec<L>,
    ) -> io::Result<Net> {
        let shards = links.len();
        if shards == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ustack-net: no link",
            ));
        }
        let mut threads = Vec::with_capacity(shards);
        let mut queues = Vec::with_capacity(shards);
        for (k, link) in links.into_iter().enumerate() {
            let b = builder.clone().shard(k);
            let build: Build = Box::new(move || Ok(vec![b.build(DynLink::new(link))?]));
            let (thread, q) =
                spawn_loop(format!("ustack-net-{k}"), build, vec![member(k, shards)])?;
            threads.push(thread);
            queues.extend(q);
        }
        Ok(Net::from_parts(threads, queues))
    }
}

fn member(shard: usize, shards: usize) -> MemberSpec {
    MemberSpec {
        shard,
        shards,
        rss: default_rss(shards),
    }
}
