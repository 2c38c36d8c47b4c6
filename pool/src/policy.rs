//! The navigation policy of a session: which URLs its pages may load. Enforced for the URL a
//! client navigates to and, through the paused-request hook, for every request the pages make
//! (redirect hops and subresources included).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a session's pages may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NavPolicy {
    /// Loopback, RFC 1918, link-local (cloud metadata), CGNAT and unique-local addresses, and
    /// `localhost` names.
    pub allow_private_networks: bool,
    /// Hosts (`example.com`) or suffixes (`*.example.com`); empty = any public host.
    pub allow_hosts: Vec<String>,
}

impl Default for NavPolicy {
    /// A warm worker's policy before a lease: nothing private.
    fn default() -> Self {
        NavPolicy { allow_private_networks: false, allow_hosts: Vec::new() }
    }
}

impl NavPolicy {
    /// Why `url` is refused, or `Ok` when it may load, judged as written: a name by
    /// `allow_hosts`, an address by its range. The egress proxy judges the addresses a name
    /// resolves to (`crate::egress`).
    pub fn check(&self, url: &str) -> Result<(), String> {
        if url == "about:blank" || url.starts_with("data:") || url.starts_with("blob:") {
            return Ok(());
        }
        let parsed = url::Url::parse(url).map_err(|e| format!("{}: {e}", not_a_url(url)))?;
        if !matches!(parsed.scheme(), "http" | "https" | "ws" | "wss") {
            return Err(format!("scheme `{}` is not allowed: only http, https and about:blank", parsed.scheme()));
        }
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => d.trim_end_matches('.').to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(format!("{url:?} has no host")),
        };
        let private = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => private_v4(ip),
            Some(url::Host::Ipv6(ip)) => private_v6(ip),
            _ => host == "localhost" || host.ends_with(".localhost"),
        };
        if private && !self.allow_private_networks {
            return Err(format!("{host} is a private, loopback or link-local address and {NO_PRIVATE}"));
        }
        if !self.allow_hosts.is_empty() && !self.allow_hosts.iter().any(|pattern| host_matches(pattern, &host)) {
            return Err(format!(
                "{host} is not in this tenant's allow_hosts (the tenant setting allow_hosts; ask an admin to add it: \
                 `browserpool admin tenants put <tenant> --allow-hosts {host},...`, listing the hosts it keeps too)"
            ));
        }
        Ok(())
    }
}

/// Why a private address is refused, and who may allow it.
pub const NO_PRIVATE: &str = "this tenant does not allow private networks (the tenant setting \
     allow_private_networks; ask an admin to allow them: `browserpool admin tenants put <tenant> \
     --allow-private-networks true`)";

/// `"example.com" is not a url`, with the URL it likely meant when it has no scheme.
pub fn not_a_url(url: &str) -> String {
    let bare = !url.contains("://") && url.contains('.') && !url.contains(char::is_whitespace);
    match bare {
        true => format!("{url:?} is not a url (no scheme): give https://{}", with_path(url)),
        false => format!("{url:?} is not a url (give an absolute URL such as https://example.com/)"),
    }
}

fn with_path(url: &str) -> String {
    match url.contains('/') {
        true => url.to_string(),
        false => format!("{url}/"),
    }
}

pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => host == pattern,
    }
}

/// Whether `ip` is not a public internet address: loopback, RFC 1918, link-local (cloud
/// metadata), CGNAT, unique-local, benchmarking, multicast, reserved or unspecified.
pub fn private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, d] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        // IETF protocol assignments (192.0.0.0/24), and Azure's WireServer.
        || (a, b, c) == (192, 0, 0)
        || [a, b, c, d] == [168, 63, 129, 16]
}

fn private_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return private_v4(v4);
    }
    let seg = ip.segments();
    let low32 = || Ipv4Addr::from((ip.to_bits() & 0xffff_ffff) as u32);
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local
        || (seg[0] & 0xffc0) == 0xfe80 // link local
        || (seg[0] & 0xffc0) == 0xfec0 // site local (deprecated, still routed by some)
        // Addresses that carry an IPv4 address: NAT64 (64:ff9b::/96 and the local-use
        // 64:ff9b:1::/48), IPv4-compatible (::/96) and 6to4 (2002::/16) by the IPv4 inside;
        // Teredo (2001::/32) hides its IPv4, so all of it.
        || (seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && private_v4(low32()))
        || seg[..3] == [0x64, 0xff9b, 1]
        || (seg[..6] == [0, 0, 0, 0, 0, 0] && private_v4(low32()))
        || (seg[0] == 0x2002 && private_v4(Ipv4Addr::from(((seg[1] as u32) << 16) | seg[2] as u32)))
        || seg[..2] == [0x2001, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> NavPolicy {
        NavPolicy { allow_private_networks: true, allow_hosts: vec![] }
    }

    #[test]
    fn private_ranges_are_refused_unless_allowed() {
        let p = NavPolicy::default();
        for url in [
            "http://127.0.0.1:8080/",
            "http://localhost/",
            "http://app.localhost/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b:1::1]/",
            "http://[::127.0.0.1]/",
            "http://[2002:7f00:1::]/",
            "http://[2002:a9fe:a9fe::]/",
            "http://[2001:0:4136:e378::1]/",
            "http://[fec0::1]/",
            "http://192.0.0.8/",
            "http://168.63.129.16/",
            "http://224.0.0.1/",
            "http://240.0.0.1/",
            "http://198.18.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://017700000001/",
        ] {
            assert!(p.check(url).is_err(), "{url} must be refused");
            assert!(open().check(url).is_ok(), "{url} allowed with private networks");
        }
        assert!(p.check("https://example.com/").is_ok());
        assert!(p.check("http://8.8.8.8/").is_ok());
        assert!(p.check("http://[2002:808:808::]/").is_ok(), "6to4 of a public address");
        assert!(p.check("http://[2606:4700::1111]/").is_ok());
        assert!(p.check("about:blank").is_ok());
    }

    #[test]
    fn schemes_and_allow_hosts() {
        let p =
            NavPolicy { allow_private_networks: false, allow_hosts: vec!["example.com".into(), "*.corp.test".into()] };
        assert!(p.check("https://example.com/x").is_ok());
        assert!(p.check("https://www.corp.test/").is_ok());
        assert!(p.check("https://corp.test/").is_err(), "*.suffix means subdomains");
        assert!(p.check("https://evil.com/").unwrap_err().contains("allow_hosts"));
        assert!(p
            .check("https://evil.com/")
            .unwrap_err()
            .contains("browserpool admin tenants put <tenant> --allow-hosts evil.com"));
        assert_eq!(not_a_url("example.com"), r#""example.com" is not a url (no scheme): give https://example.com/"#);
        assert_eq!(
            not_a_url("example.com/a"),
            r#""example.com/a" is not a url (no scheme): give https://example.com/a"#
        );
        assert!(not_a_url("not a url").contains("give an absolute URL such as https://example.com/"));
        assert!(open().check("file:///etc/passwd").unwrap_err().contains("scheme"));
        assert!(open().check("chrome://settings").is_err());
    }
}
