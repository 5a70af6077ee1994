//! How often the daemon asks the kernel to resolve a neighbour.
//!
//! Each address is asked about at most every [`PER_ADDRESS`]; all
//! addresses together at most [`RATE`] per second (with a burst of
//! [`BURST`]), and at most [`MAX_TRACKED`] addresses are remembered. So a
//! flood of packets to random addresses of a connected /64 grows neither
//! the daemon's memory nor the requests (and the kernel's ARP / ND work)
//! beyond those caps; what the caps turn away is counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Least time between two requests for one address.
pub const PER_ADDRESS: Duration = Duration::from_millis(300);
/// Requests per second over all addresses.
pub const RATE: u32 = 256;
/// Requests allowed at once after a quiet period.
pub const BURST: u32 = 64;
/// Addresses remembered (entries older than 10 s are forgotten).
pub const MAX_TRACKED: usize = 4096;
const FORGET: Duration = Duration::from_secs(10);

/// The limiter; one per daemon.
#[derive(Debug)]
pub struct ResolveLimiter {
    asked: HashMap<(u32, IpAddr), Instant>,
    tokens: f64,
    last: Option<Instant>,
    /// Misses not asked about because of the global caps.
    pub capped: u64,
    /// Requests made (each one the kernel's ARP / ND work).
    pub requested: u64,
}

impl Default for ResolveLimiter {
    fn default() -> Self {
        ResolveLimiter {
            asked: HashMap::new(),
            tokens: f64::from(BURST),
            last: None,
            capped: 0,
            requested: 0,
        }
    }
}

impl ResolveLimiter {
    /// Whether to ask the kernel about `ip` on `ifindex` now (and, if so,
    /// records that it was asked).
    pub fn should_ask(&mut self, ifindex: u32, ip: IpAddr, now: Instant) -> bool {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * f64::from(RATE)).min(f64::from(BURST));
        }
        self.last = Some(now);
        let key = (ifindex, ip);
        if self
            .asked
            .get(&key)
            .is_some_and(|t| now.saturating_duration_since(*t) < PER_ADDRESS)
        {
            return false;
        }
        if self.asked.len() >= MAX_TRACKED && !self.asked.contains_key(&key) {
            self.asked
                .retain(|_, t| now.saturating_duration_since(*t) < FORGET);
        }
        if self.tokens < 1.0 || (self.asked.len() >= MAX_TRACKED && !self.asked.contains_key(&key))
        {
            self.capped += 1;
            return false;
        }
        self.tokens -= 1.0;
        self.asked.insert(key, now);
        self.requested += 1;
        true
    }

    /// Forgets addresses not asked about for a while (call now and then).
    pub fn expire(&mut self, now: Instant) {
        self.asked
            .retain(|_, t| now.saturating_duration_since(*t) < FORGET);
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.asked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_asked_again_only_after_the_interval() {
        let mut l = ResolveLimiter::default();
        let t = Instant::now();
        let ip: IpAddr = "198.19.0.108".parse().unwrap();
        assert!(l.should_ask(6, ip, t));
        assert!(!l.should_ask(6, ip, t + Duration::from_millis(100)));
        assert!(l.should_ask(6, ip, t + Duration::from_millis(400)));
        assert!(
            l.should_ask(7, ip, t + Duration::from_millis(400)),
            "another interface"
        );
        assert_eq!(l.capped, 0);
    }

    #[test]
    fn a_flood_of_random_addresses_stays_under_the_caps() {
        let mut l = ResolveLimiter::default();
        let t0 = Instant::now();
        let mut asked = 0u64;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        // 200,000 misses to distinct addresses of a /64 over 10 s.
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ip = IpAddr::V6(std::net::Ipv6Addr::from(
                (0x2001_0002_0000_8000u128 << 64) | u128::from(x),
            ));
            let now = t0 + Duration::from_micros(i * 50);
            if l.should_ask(6, ip, now) {
                asked += 1;
            }
            assert!(l.tracked() <= MAX_TRACKED);
        }
        let limit = u64::from(BURST) + u64::from(RATE) * 10 + 1;
        assert!(asked <= limit, "{asked} requests > {limit}");
        assert!(
            asked >= u64::from(RATE) * 9,
            "the cap still lets work through: {asked}"
        );
        assert_eq!(l.capped, 200_000 - asked);
        assert_eq!(l.requested, asked);
    }
}
