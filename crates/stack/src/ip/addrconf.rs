//! Router discovery and stateless address autoconfiguration for a host on an Ethernet
//! link, after Linux's `net/ipv6/addrconf.c` (`addrconf_dad_completed`'s first router
//! solicitation, `addrconf_rs_timer`, `addrconf_prefix_rcv`, `addrconf_verify`) and
//! `net/ipv6/ndisc.c` (`ndisc_router_discovery`). Off unless
//! `net.ipv6.conf.default.accept_ra` is set (Linux's default is on; ustack's is off).
//!
//! - Router solicitation (RFC 4861 §6.3.7): once the link-local address is usable (after
//!   its duplicate address detection, as Linux's `addrconf_dad_completed`), up to
//!   `router_solicitations` solicitations to all-routers, `router_solicitation_interval`
//!   apart, until an advertisement arrives. (Linux backs the interval off as RFC 7559 asks
//!   and randomises it; ustack keeps it fixed.)
//! - Router advertisements (RFC 4861 §6.1.2 validity, §6.3.4 processing): hop limit 255
//!   and a link-local source, else dropped (`IPV6_NDISC_INVALID`); the router becomes a
//!   default router for its Router Lifetime (`accept_ra_defrtr`; 0 removes it; at most
//!   [`MAX_ROUTERS`], beyond that `IPV6_RA_ROUTER_LIMIT`), its source link-layer address
//!   goes into the neighbour table (STALE), a non-zero Cur Hop Limit becomes
//!   `net.ipv6.conf.default.hop_limit` (Linux does the same); Reachable Time, Retrans
//!   Timer and the MTU option are not applied.
//! - Prefix information (`accept_ra_pinfo`; RFC 4862 §5.5.3 with Linux's
//!   `addrconf_prefix_rcv`): a link-local prefix, or a preferred lifetime above the
//!   valid one, is ignored; with the A flag (and `autoconf`) and a /64 prefix, the address
//!   prefix + the interface identifier of the link-local address (modified EUI-64) is
//!   made, tentative until duplicate address detection passes, unless valid lifetime 0 or
//!   `max_addresses` reached (`IPV6_RA_ADDR_LIMIT`). On-link (the L flag) makes the /64
//!   on-link through the address (a prefix with L and not A is not remembered). An
//!   existing address's lifetimes are updated as Linux does (deviating from §5.5.3 (e)
//!   as draft-gont-6man-slaac-renum asks): the valid lifetime becomes the received one,
//!   but not below the smaller of the remaining one and two hours; the preferred one is
//!   reset to the received one.
//! - Lifetimes (RFC 4862 §5.5.4): past the preferred lifetime an address is deprecated
//!   (not a source for new communication while another fits), past the valid lifetime it
//!   is removed; routers past their lifetime are removed.

use core::net::Ipv6Addr;
use core::time::Duration;

use ustack_obs::{DropReason, Instant};
use ustack_wire::icmpv6::Message;
use ustack_wire::ndisc;

use super::ipv6::{Addr6, AddrState, Inbound6, is_link_local};
use crate::neigh::Update;
use crate::{Ipv6Cidr, Stack, Sysctl};

/// Default routers kept from advertisements; more are refused (`IPV6_RA_ROUTER_LIMIT`).
/// Linux bounds them only by its routing table; a host needs a few.
pub const MAX_ROUTERS: usize = 8;
/// The all-routers multicast address (RFC 4291 §2.7.1).
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// RFC 4862 §5.5.3 (e): two hours, the floor an advertisement cannot lower a remaining
/// valid lifetime below (Linux `MIN_VALID_LIFETIME`).
const MIN_VALID_LIFETIME: Duration = Duration::from_secs(2 * 3600);

/// The lifetimes of an autoconfigured address; `None`: infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub valid: Option<Instant>,
    pub preferred: Option<Instant>,
}

/// A default router learnt from an advertisement (RFC 4861 §6.3.4).
#[derive(Debug, Clone, Copy)]
struct Router {
    addr: Ipv6Addr,
    until: Instant,
}

/// Router solicitation and what advertisements taught.
#[derive(Debug)]
pub(crate) struct Addrconf {
    routers: Vec<Router>,
    /// Solicitations still to send (0: done, or never started).
    rs_left: u64,
    /// Solicitation was started once (at creation, or when `accept_ra` was set).
    rs_armed: bool,
    /// When the next solicitation is due; `None` while the link-local address is not
    /// usable yet.
    rs_next: Option<Instant>,
    /// The earliest deadline: the next solicitation, a router's or an address's lifetime.
    pub(crate) next: Option<Instant>,
}

impl Addrconf {
    /// Solicitations start when the link-local address is usable: at once if it is
    /// (`first_state` Preferred: no duplicate address detection), else after DAD.
    pub(crate) fn new(ndisc: bool, sysctl: &Sysctl, first_state: AddrState) -> Addrconf {
        let rs_left = if ndisc && sysctl.ip6_accept_ra != 0 {
            sysctl.ip6_router_solicitations
        } else {
            0
        };
        let rs_next = (rs_left > 0 && first_state == AddrState::Preferred).then_some(Instant::ZERO);
        Addrconf {
            routers: Vec::new(),
            rs_left,
            rs_armed: rs_left > 0,
            rs_next,
            next: rs_next,
        }
    }

    /// The tunables changed: `accept_ra` turned on for the first time starts router
    /// solicitation (at once if the link-local address is usable).
    pub(crate) fn sysctl_changed(&mut self, ndisc: bool, sysctl: &Sysctl, ll_ready: bool) {
        if self.rs_armed || !ndisc || sysctl.ip6_accept_ra == 0 {
            return;
        }
        self.rs_armed = true;
        self.rs_left = sysctl.ip6_router_solicitations;
        if self.rs_left > 0 && ll_ready {
            self.rs_next = Some(Instant::ZERO);
            self.next = crate::stack::earliest(self.next, self.rs_next);
        }
    }

    /// The link-local address passed duplicate address detection at `now`.
    pub(crate) fn link_local_ready(&mut self, now: Instant) {
        if self.rs_left > 0 && self.rs_next.is_none() {
            self.rs_next = Some(now);
            self.next = crate::stack::earliest(self.next, self.rs_next);
        }
    }

    /// The first default router, if any.
    pub(crate) fn default_router(&self) -> Option<Ipv6Addr> {
        self.routers.first().map(|r| r.addr)
    }

    /// The default routers learnt, each with the end of its lifetime.
    pub(crate) fn routers(&self) -> impl Iterator<Item = (Ipv6Addr, Instant)> + '_ {
        self.routers.iter().map(|r| (r.addr, r.until))
    }
}

/// A lifetime in seconds from an advertisement as a deadline (`None`: infinity).
fn deadline(now: Instant, secs: u32) -> Option<Instant> {
    (secs != ndisc::INFINITE_LIFETIME).then(|| now + Duration::from_secs(u64::from(secs)))
}

impl Stack {
    /// A Router Advertisement (checksum verified): Linux `ndisc_router_discovery`.
    pub(crate) fn ndisc_router_discovery(&mut self, now: Instant, inb: &Inbound6) {
        if !self.ip6.ndisc {
            return;
        }
        // RFC 4861 §6.1.2: "IP Source Address is a link-local address" (routers must use
        // theirs, so that hosts can tell them apart across renumbering) and "IP Hop Limit
        // field has a value of 255" (not forwarded: from this link).
        if inb.hop_limit != 255 || !is_link_local(inb.src) {
            return self.mib.drop(DropReason::NdiscInvalid);
        }
        let Ok(ra) = ndisc::RouterAdvert::parse(inb.payload) else {
            return self.mib.drop(DropReason::NdiscInvalid);
        };
        if self.sysctl.ip6_accept_ra == 0 {
            // Linux `ipv6_accept_ra`: counted by type, otherwise ignored.
            return;
        }
        // Linux `addrconf_rs_timer`: solicitations stop once an advertisement came.
        self.ip6.addrconf.rs_left = 0;
        self.ip6.addrconf.rs_next = None;
        if ra.cur_hop_limit != 0 {
            self.sysctl.ip6_hop_limit = u64::from(ra.cur_hop_limit);
        }
        if self.sysctl.ip6_accept_ra_defrtr != 0 {
            self.ra_default_router(now, inb.src, ra.router_lifetime);
        }
        if let Some(mac) = ra.source_lladdr {
            // §6.3.4: "the link-layer address SHOULD be recorded in the Neighbor Cache
            // entry for the router (creating an entry if necessary)", STALE if new or
            // changed.
            let how = Update {
                create: true,
                reachable: false,
                override_: true,
            };
            for frame in self.neigh.update(now, inb.src.into(), mac, how) {
                self.eth_fill_and_push(frame, mac, DropReason::DevQueueFull);
            }
        }
        if self.sysctl.ip6_accept_ra_pinfo != 0 {
            for p in ra.prefixes.iter() {
                self.addrconf_prefix_rcv(now, &p);
            }
        }
        // The hop limit, the default router and on-link prefixes may have changed: TCP's
        // IPv6 header templates hold the first two and the route (`tcp::xmit6`).
        self.invalidate_tx_templates();
        self.addrconf_rearm();
    }

    /// RFC 4861 §6.3.4: "If the address is not already present in the host's Default
    /// Router List, and the advertisement's Router Lifetime is non-zero, create a new
    /// entry ... If the address is already present ... reset its invalidation timer to
    /// the Router Lifetime value ... If the address is already present ... and the
    /// received Router Lifetime value is zero, immediately time-out the entry".
    fn ra_default_router(&mut self, now: Instant, addr: Ipv6Addr, lifetime: u16) {
        let routers = &mut self.ip6.addrconf.routers;
        let known = routers.iter().position(|r| r.addr == addr);
        let until = now + Duration::from_secs(u64::from(lifetime));
        match (known, lifetime) {
            (Some(i), 0) => {
                routers.remove(i);
            }
            (Some(i), _) => routers[i].until = until,
            (None, 0) => {}
            (None, _) if routers.len() >= MAX_ROUTERS => {
                self.mib.drop(DropReason::Ip6RaRouterLimit);
            }
            (None, _) => routers.push(Router { addr, until }),
        }
    }

    /// One Prefix Information option (Linux `addrconf_prefix_rcv`, RFC 4862 §5.5.3).
    fn addrconf_prefix_rcv(&mut self, now: Instant, p: &ndisc::PrefixInfo) {
        // (b) "If the prefix is the link-local prefix, silently ignore"; Linux also
        // ignores a multicast one.
        if is_link_local(p.prefix) || p.prefix.is_multicast() {
            return;
        }
        // (c) "If the preferred lifetime is greater than the valid lifetime, silently
        // ignore the Prefix Information option."
        if p.preferred_lifetime > p.valid_lifetime {
            return;
        }
        // (a) "If the Autonomous flag is not set, silently ignore".
        if !p.autonomous || self.sysctl.ip6_autoconf == 0 {
            return;
        }
        // (d) "If the sum of the prefix length and interface identifier length does not
        // equal 128 bits, the Prefix Information option MUST be ignored" (the identifier
        // is 64 bits on Ethernet, RFC 2464 §4; Linux: "prefix with wrong length").
        if p.prefix_len != 64 {
            return;
        }
        let iid = u128::from(ndisc::link_local_from_mac(self.mac)) & u128::from(u64::MAX);
        let prefix = u128::from(p.prefix) & !u128::from(u64::MAX);
        let addr = Ipv6Addr::from(prefix | iid);
        let preferred = deadline(now, p.preferred_lifetime);
        let received_valid = deadline(now, p.valid_lifetime);
        if let Some(a) = self.ip6.addrs.iter_mut().find(|a| a.cidr.addr == addr) {
            // (e), as Linux: a static address of the same value is left alone.
            let Some(lft) = a.lft.as_mut() else { return };
            let floor = lft.valid.map(|v| v.min(now + MIN_VALID_LIFETIME));
            lft.valid = match (received_valid, floor) {
                (None, _) | (_, None) => None,
                (Some(r), Some(f)) => Some(r.max(f)),
            };
            lft.preferred = preferred;
            if p.on_link {
                a.cidr.prefix_len = 64;
            }
            if a.state == AddrState::Deprecated && preferred.is_none_or(|t| t > now) {
                a.state = AddrState::Preferred;
            }
            return;
        }
        // "If the prefix advertised is not equal to the prefix of an address configured
        // by stateless autoconfiguration already in the list of addresses associated
        // with the interface (where "equal" means the two prefix lengths are the same
        // and the first prefix- length bits of the prefixes are identical), and if the
        // Valid Lifetime is not 0, form an address".
        if p.valid_lifetime == 0 {
            return;
        }
        if self.ip6.addrs.len() as u64 >= self.sysctl.ip6_max_addresses {
            return self.mib.drop(DropReason::Ip6RaAddrLimit);
        }
        let state = super::ipv6::initial_state(true, &self.sysctl);
        self.ip6.addrs.push(Addr6 {
            cidr: Ipv6Cidr::new(addr, if p.on_link { 64 } else { 128 }),
            state,
            lft: Some(Lifetimes {
                valid: received_valid,
                preferred,
            }),
        });
    }

    /// The router-discovery timers: the next solicitation, lifetimes that ended.
    pub(crate) fn addrconf_timeout(&mut self, now: Instant) {
        let ac = &mut self.ip6.addrconf;
        if ac.rs_next.is_some_and(|t| t <= now) && ac.rs_left > 0 {
            ac.rs_left -= 1;
            ac.rs_next = (ac.rs_left > 0)
                .then(|| now + Duration::from_secs(self.sysctl.ip6_router_solicitation_interval));
            self.ndisc_send_rs(now);
        }
        let held = (self.ip6.addrconf.routers.len(), self.ip6.addrs.len());
        self.ip6.addrconf.routers.retain(|r| r.until > now);
        // RFC 4862 §5.5.4: deprecated at the preferred lifetime, gone at the valid one.
        self.ip6
            .addrs
            .retain(|a| a.lft.is_none_or(|l| l.valid.is_none_or(|v| v > now)));
        if (self.ip6.addrconf.routers.len(), self.ip6.addrs.len()) != held {
            // A route gone: TCP's IPv6 header templates hold their next hop.
            self.invalidate_tx_templates();
        }
        for a in &mut self.ip6.addrs {
            if let Some(l) = a.lft
                && l.preferred.is_some_and(|p| p <= now)
                && a.state == AddrState::Preferred
            {
                a.state = AddrState::Deprecated;
            }
        }
        self.addrconf_rearm();
    }

    /// Recompute the earliest router-discovery deadline.
    fn addrconf_rearm(&mut self) {
        let ac = &self.ip6.addrconf;
        let routers = ac.routers.iter().map(|r| r.until).min();
        let addrs = self
            .ip6
            .addrs
            .iter()
            .filter_map(|a| {
                let l = a.lft?;
                let preferred = l.preferred.filter(|_| a.state != AddrState::Deprecated);
                crate::stack::earliest(l.valid, preferred)
            })
            .min();
        let next = crate::stack::earliest(crate::stack::earliest(ac.rs_next, routers), addrs);
        self.ip6.addrconf.next = next;
    }

    /// A Router Solicitation to all-routers from the link-local address, with our
    /// link-layer address (RFC 4861 §6.3.7; Linux `ndisc_send_rs`).
    fn ndisc_send_rs(&mut self, now: Instant) {
        let Some(src) = self.ip6.select_source(ALL_ROUTERS) else {
            return;
        };
        let rs = ndisc::RouterSolicit {
            source_lladdr: Some(self.mac),
        };
        self.ndisc_send_msg(
            now,
            (src, ALL_ROUTERS),
            Message::RouterSolicit,
            rs.buffer_len(),
            |buf, s, d| rs.emit(buf, &s, &d),
        );
    }

    /// The default routers learnt from advertisements, each with the end of its lifetime
    /// (`ip -6 route show default`).
    pub fn ipv6_default_routers(&self) -> Vec<(Ipv6Addr, Instant)> {
        self.ip6.addrconf.routers().collect()
    }

    /// The lifetimes of an autoconfigured address (valid, preferred; `None`: infinite),
    /// or `None` if `addr` is not one.
    pub fn ipv6_addr_lifetimes(
        &self,
        addr: Ipv6Addr,
    ) -> Option<(Option<Instant>, Option<Instant>)> {
        self.ip6
            .addrs
            .iter()
            .find(|a| a.cidr.addr == addr)
            .and_then(|a| a.lft)
            .map(|l| (l.valid, l.preferred))
    }
}
