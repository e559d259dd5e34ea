//! Which address a request came from, and whether a token admits it (its
//! `allow_ips` entries, parsed by `parse_allow_ip`).
//!
//! The socket peer is the truth unless it is one of the configured trusted
//! proxies; only then are `X-Forwarded-For` and `X-Real-IP` believed.
//! `X-Forwarded-For` is read from the right, as each proxy appends the
//! address it saw: the client is the first address that is not a trusted
//! proxy, so whatever a client writes into the header itself is never
//! taken. Addresses are compared in canonical form, so an IPv4 client seen
//! through a dual-stack socket (`::ffff:a.b.c.d`) matches v4 entries.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

/// An `allow_ips` entry that is neither an IP address nor a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow_ips entry {0:?} is neither an IP address nor a CIDR")]
pub struct BadAllowIp(pub String);

/// The client's address: the peer's, or the forwarded one when the peer is
/// a trusted proxy. `None` when there is no peer (in-process tests).
pub fn client_ip(peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let peer = peer?.ip().to_canonical();
    if !trusted.iter().any(|net| net.contains(&peer)) {
        return Some(peer);
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty())
        .collect();
    if hops.is_empty() {
        let real = headers.get("x-real-ip").and_then(|v| v.to_str().ok()).and_then(parse_ip);
        return Some(real.unwrap_or(peer));
    }
    // From the nearest hop outwards: the first untrusted address is the
    // client; a hop that is not an address ends the walk at the proxy that
    // wrote it.
    let mut nearest = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_ip(hop) else { break };
        nearest = ip;
        if !trusted.iter().any(|net| net.contains(&ip)) {
            break;
        }
    }
    Some(nearest)
}

/// Parses `1.2.3.4`, `::1`, `1.2.3.4:80` or `[::1]:80`.
fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    s.parse::<IpAddr>().ok().or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip())).map(|ip| ip.to_canonical())
}

/// Whether `ip` is admitted by `allow` (empty admits everyone; an unknown
/// address is admitted by nothing else).
pub fn allowed(ip: Option<IpAddr>, allow: &[IpNet]) -> bool {
    if allow.is_empty() {
        return true;
    }
    ip.is_some_and(|ip| allow.iter().any(|net| net.contains(&ip)))
}

/// Parses an allowlist entry: a bare IP (v4 or v6) or a CIDR.
pub fn parse_allow_ip(entry: &str) -> Result<IpNet, BadAllowIp> {
    let entry = entry.trim();
    if let Ok(net) = entry.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    entry.parse::<IpAddr>().map(|ip| IpNet::from(ip.to_canonical())).map_err(|_| BadAllowIp(entry.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn nets(entries: &[&str]) -> Vec<IpNet> {
        entries.iter().map(|e| parse_allow_ip(e).unwrap()).collect()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn allowlist_matches_ips_and_cidrs_of_both_families() {
        let allow = nets(&["10.0.0.0/8", "192.168.1.7", "2001:db8::/32", "::1"]);
        let ok = ["10.9.8.7", "192.168.1.7", "2001:db8:1::5", "::1", "::ffff:10.1.1.1"];
        for ip in ok {
            let ip = ip.parse::<IpAddr>().unwrap().to_canonical();
            assert!(allowed(Some(ip), &allow), "{ip} should be allowed");
        }
        for ip in ["11.0.0.1", "192.168.1.8", "2001:db9::1", "127.0.0.1"] {
            assert!(!allowed(Some(ip.parse().unwrap()), &allow), "{ip} should be refused");
        }
        assert!(!allowed(None, &allow));
        assert!(allowed(None, &[]));
    }

    #[test]
    fn forwarded_for_is_read_from_the_right_so_a_forged_first_entry_is_never_taken() {
        let trusted = nets(&["127.0.0.0/8", "10.0.0.0/8"]);
        let proxy: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        // The client wrote "1.2.3.4" itself; the trusted proxy appended what it saw.
        let forged = headers(&[("x-forwarded-for", "1.2.3.4, 198.51.100.7")]);
        assert_eq!(client_ip(Some(proxy), &forged, &trusted), ip("198.51.100.7"));
        // Through two trusted proxies.
        let chain = headers(&[("x-forwarded-for", "1.2.3.4, 198.51.100.7, 10.1.2.3")]);
        assert_eq!(client_ip(Some(proxy), &chain, &trusted), ip("198.51.100.7"));
        // Only trusted hops: the farthest one.
        let inside = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.2.3")]);
        assert_eq!(client_ip(Some(proxy), &inside, &trusted), ip("10.9.9.9"));
        // A hop that is not an address stops at the proxy that wrote it.
        let junk = headers(&[("x-forwarded-for", "198.51.100.7, junk, 10.1.2.3")]);
        assert_eq!(client_ip(Some(proxy), &junk, &trusted), ip("10.1.2.3"));
        // Several headers are one list, in order.
        let mut split = headers(&[("x-forwarded-for", "1.2.3.4")]);
        split.append("x-forwarded-for", "198.51.100.9".parse().unwrap());
        assert_eq!(client_ip(Some(proxy), &split, &trusted), ip("198.51.100.9"));
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let trusted = nets(&["127.0.0.0/8", "10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.1"), ("x-real-ip", "198.51.100.1")]);
        let proxy: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let stranger: SocketAddr = "192.0.2.1:5555".parse().unwrap();
        assert_eq!(client_ip(Some(proxy), &h, &trusted), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(client_ip(Some(stranger), &h, &trusted), Some("192.0.2.1".parse().unwrap()));
        let real_only = headers(&[("x-real-ip", "[2001:db8::1]:443")]);
        assert_eq!(client_ip(Some(proxy), &real_only, &trusted), Some("2001:db8::1".parse().unwrap()));
        let garbage = headers(&[("x-forwarded-for", "not-an-ip")]);
        assert_eq!(client_ip(Some(proxy), &garbage, &trusted), Some("127.0.0.1".parse().unwrap()));
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:1".parse().unwrap();
        assert_eq!(client_ip(Some(mapped), &h, &trusted), Some("203.0.113.9".parse().unwrap()));
    }
}
