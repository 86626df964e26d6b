//! Whose word the forwarding headers are: the `trusted_proxies` setting, and the client
//! address the trusted ones name.
//!
//! A peer outside `trusted_proxies` gets its `X-Forwarded-*`, `Forwarded` and
//! `X-Real-IP` replaced: anything it claims about hops before it is its own invention.
//! A trusted peer (a load balancer in front of holdfast) has its lists extended, and
//! the real client is the rightmost address in `X-Forwarded-For` (after the peer) that
//! is not itself a trusted proxy, as nginx's `real_ip_recursive on` and Envoy's
//! `xff_num_trusted_hops` find it.
//!
//! Pure: addresses and header values in, an address out.

use std::net::IpAddr;

use crate::http1::{elements, trim_ows};

/// A network: an address and how many of its leading bits are fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// `"10.0.0.0/8"`, `"fd00::/8"`, or a bare address (a network of one).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let bad = |why: &str| format!("{text:?} is not a network like \"10.0.0.0/8\": {why}");
        let (addr, bits) = match text.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (text, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|_| bad("not an IP address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b.trim().parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(|| {
                bad(&format!("the prefix length is not a number from 0 to {max}"))
            })?,
        };
        Ok(Cidr { net: net.to_canonical(), bits })
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_matches(u128::from(net.to_bits()), u128::from(ip.to_bits()), self.bits, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_matches(net.to_bits(), ip.to_bits(), self.bits, 128)
            }
            _ => false,
        }
    }
}

/// Whether the first `bits` of `width`-bit numbers `a` and `b` are the same.
fn prefix_matches(a: u128, b: u128, bits: u8, width: u32) -> bool {
    let shift = width.saturating_sub(u32::from(bits));
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

/// The peers whose forwarding headers holdfast believes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<Cidr>,
}

impl TrustedProxies {
    pub fn new(networks: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies { networks }
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        !self.networks.is_empty() && self.networks.iter().any(|n| n.contains(ip))
    }

    /// The client a request from trusted `peer` is really from: walking the
    /// `X-Forwarded-For` lists (`values`, in header order) from the right, the first
    /// address that is not a trusted proxy; an entry that is not an address ends the
    /// walk at the trusted address after it.
    pub fn real_client<'a>(&self, peer: IpAddr, values: impl Iterator<Item = &'a [u8]>) -> IpAddr {
        let entries: Vec<&[u8]> = values.flat_map(elements).collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            let Some(ip) = parse_entry(entry) else { break };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        client
    }
}

/// An `X-Forwarded-For` entry: an address, perhaps with a port (`1.2.3.4:5678`,
/// `[::1]:5678`).
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(trim_ows(entry)).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    text.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| Cidr::parse(n).unwrap()).collect())
    }

    #[test]
    fn networks_contain_their_addresses_only() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains(ip("10.1.200.3")));
        assert!(!net.contains(ip("10.2.0.1")));
        assert!(net.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped IPv6 counts as IPv4");
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.1")));
        assert!(!Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.2")));
    }

    #[test]
    fn bad_networks_are_refused() {
        for bad in ["10.0.0.0/33", "::/129", "ten/8", "10.0.0.0/x", ""] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn real_client_is_the_rightmost_untrusted_address() {
        let t = trusted(&["10.0.0.0/8"]);
        let xff: [&[u8]; 2] = [b"203.0.113.7, 198.51.100.2", b"10.0.0.5"];
        assert_eq!(t.real_client(ip("10.0.0.1"), xff.into_iter()), ip("198.51.100.2"));
        // Nothing forwarded: the peer itself.
        assert_eq!(t.real_client(ip("10.0.0.1"), std::iter::empty()), ip("10.0.0.1"));
        // All trusted: the leftmost.
        let all: [&[u8]; 1] = [b"10.9.9.9, 10.0.0.2"];
        assert_eq!(t.real_client(ip("10.0.0.1"), all.into_iter()), ip("10.9.9.9"));
        // Garbage ends the walk at the trusted address after it.
        let junk: [&[u8]; 1] = [b"1.2.3.4, unknown, 10.0.0.3"];
        assert_eq!(t.real_client(ip("10.0.0.1"), junk.into_iter()), ip("10.0.0.3"));
        let ports: [&[u8]; 1] = [b"[2001:db8::1]:443, 192.0.2.1:80"];
        assert_eq!(t.real_client(ip("10.0.0.1"), ports.into_iter()), ip("192.0.2.1"));
    }
}
