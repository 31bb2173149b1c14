//! Link-layer, IPv4 and UDP header parsing.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use thiserror::Error;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
const IPPROTO_UDP: u8 = 17;
const IP_MF: u16 = 0x2000;
const IP_OFFSET_MASK: u16 = 0x1FFF;

/// A link-layer header type, as numbered by the tcpdump.org `LINKTYPE_` registry.
///
/// The constants name the types that [`udp_datagram`] understands; any other value is kept
/// as is and reported as [`Skip::UnsupportedLink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkType(pub u16);

impl LinkType {
    /// Ethernet II / IEEE 802.3 (1).
    pub const ETHERNET: Self = Self(1);
    /// Raw IP, version taken from the first nibble (101).
    pub const RAW: Self = Self(101);
    /// Linux cooked capture v1, "SLL" (113).
    pub const LINUX_SLL: Self = Self(113);
    /// Raw IPv4 (228).
    pub const IPV4: Self = Self(228);
    /// Raw IPv6 (229).
    pub const IPV6: Self = Self(229);
    /// Linux cooked capture v2, "SLL2" (276).
    pub const LINUX_SLL2: Self = Self(276);

    /// The registry name of a known link type.
    pub const fn name(self) -> Option<&'static str> {
        match self {
            Self::ETHERNET => Some("ETHERNET"),
            Self::RAW => Some("RAW"),
            Self::LINUX_SLL => Some("LINUX_SLL"),
            Self::IPV4 => Some("IPV4"),
            Self::IPV6 => Some("IPV6"),
            Self::LINUX_SLL2 => Some("LINUX_SLL2"),
            _ => None,
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "link type {}", self.0),
        }
    }
}

/// A UDP datagram found in a captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// The UDP payload, as long as the UDP length field says.
    pub payload: &'a [u8],
}

/// Why a frame yielded no datagram although it was meant to carry UDP over IPv4, or could not
/// be decoded far enough to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Skip {
    /// The capture's link type is not one [`udp_datagram`] understands.
    #[error("unsupported {0}")]
    UnsupportedLink(LinkType),
    /// The captured bytes end before a header (or the IPv4 packet) does.
    #[error("truncated {layer} (need {need} bytes, {have} captured)")]
    Truncated {
        /// The header or packet that was cut short.
        layer: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes captured from its start.
        have: usize,
    },
    /// An IPv4 fragment: more-fragments flag set or a non-zero fragment offset.
    #[error("IPv4 fragment (offset {offset} bytes, more fragments: {more})")]
    Fragment {
        /// Fragment offset in bytes.
        offset: u16,
        /// The more-fragments flag.
        more: bool,
    },
    /// A header field holds an impossible value.
    #[error("malformed {layer} header: {reason}")]
    Malformed {
        /// The header concerned.
        layer: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Counts of frames by what [`udp_datagram`] made of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stats {
    /// Frames that yielded a UDP/IPv4 datagram.
    pub datagrams: u64,
    /// Frames carrying something other than UDP over IPv4 (IPv6, TCP, ARP, ...).
    pub not_udp_ipv4: u64,
    /// IPv4 fragments of UDP datagrams.
    pub fragments: u64,
    /// Frames whose headers or IPv4 packet were cut short.
    pub truncated: u64,
    /// Frames with an impossible header field.
    pub malformed: u64,
    /// Frames of a link type that is not understood.
    pub unsupported_link: u64,
}

impl Stats {
    /// Counts one outcome of [`udp_datagram`].
    pub fn count(&mut self, outcome: &Result<Option<Datagram<'_>>, Skip>) {
        let counter = match outcome {
            Ok(Some(_)) => &mut self.datagrams,
            Ok(None) => &mut self.not_udp_ipv4,
            Err(Skip::Fragment { .. }) => &mut self.fragments,
            Err(Skip::Truncated { .. }) => &mut self.truncated,
            Err(Skip::Malformed { .. }) => &mut self.malformed,
            Err(Skip::UnsupportedLink(_)) => &mut self.unsupported_link,
        };
        *counter += 1;
    }

    /// Runs [`udp_datagram`] on a frame, counts the outcome and returns the datagram, if any.
    pub fn extract<'a>(&mut self, link: LinkType, frame: &'a [u8]) -> Option<Datagram<'a>> {
        let outcome = udp_datagram(link, frame);
        self.count(&outcome);
        outcome.ok().flatten()
    }

    /// Frames that yielded no datagram, for whatever reason.
    pub fn skipped(&self) -> u64 {
        self.not_udp_ipv4 + self.fragments + self.truncated + self.malformed + self.unsupported_link
    }

    /// All frames counted.
    pub fn frames(&self) -> u64 {
        self.datagrams + self.skipped()
    }
}

/// Extracts the UDP datagram carried by a captured frame.
///
/// Returns `Ok(Some(..))` for an unfragmented UDP datagram over IPv4, `Ok(None)` for a frame
/// carrying anything else (IPv6, TCP, ARP, ...), and `Err(Skip)` for frames that cannot be
/// used: IPv4 fragments, truncated or malformed headers, unsupported link types.
///
/// Ethernet frames may carry any number of stacked 802.1Q (0x8100) and 802.1ad (0x88A8, and
/// the older 0x9100) tags. The IPv4 total length is honoured, so Ethernet padding or a frame
/// check sequence after the packet is ignored, as is anything after the UDP length. Checksums
/// are not verified.
///
/// ```
/// use gapless::capture::{LinkType, udp_datagram};
///
/// // A raw IPv4 packet: 20-byte header, UDP header, 2-byte payload.
/// let packet = [
///     0x45, 0, 0, 30, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 239, 1, 2, 3, //
///     0x13, 0x88, 0x30, 0x39, 0, 10, 0, 0, b'h', b'i',
/// ];
/// let datagram = udp_datagram(LinkType::IPV4, &packet).unwrap().unwrap();
/// assert_eq!(datagram.dst.to_string(), "239.1.2.3:12345");
/// assert_eq!(datagram.payload, b"hi");
/// ```
///
/// # Errors
///
/// See [`Skip`].
pub fn udp_datagram(link: LinkType, frame: &[u8]) -> Result<Option<Datagram<'_>>, Skip> {
    match link {
        LinkType::ETHERNET => {
            let Some((header, rest)) = frame.split_first_chunk::<14>() else {
                return Err(truncated("Ethernet header", 14, frame));
            };
            by_ethertype(u16::from_be_bytes([header[12], header[13]]), rest)
        }
        LinkType::RAW => match frame.first().map(|b| b >> 4) {
            Some(4) => ipv4(frame),
            Some(6) => Ok(None),
            Some(_) => Err(Skip::Malformed {
                layer: "raw IP",
                reason: "IP version is neither 4 nor 6",
            }),
            None => Err(truncated("raw IP header", 20, frame)),
        },
        LinkType::IPV4 => ipv4(frame),
        LinkType::IPV6 => Ok(None),
        LinkType::LINUX_SLL => {
            let Some((header, rest)) = frame.split_first_chunk::<16>() else {
                return Err(truncated("Linux cooked (SLL) header", 16, frame));
            };
            by_ethertype(u16::from_be_bytes([header[14], header[15]]), rest)
        }
        LinkType::LINUX_SLL2 => {
            let Some((header, rest)) = frame.split_first_chunk::<20>() else {
                return Err(truncated("Linux cooked (SLL2) header", 20, frame));
            };
            by_ethertype(u16::from_be_bytes([header[0], header[1]]), rest)
        }
        other => Err(Skip::UnsupportedLink(other)),
    }
}

fn truncated(layer: &'static str, need: usize, have: &[u8]) -> Skip {
    Skip::Truncated {
        layer,
        need,
        have: have.len(),
    }
}

/// Follows VLAN tags from `ethertype` to the network layer.
fn by_ethertype(mut ethertype: u16, mut rest: &[u8]) -> Result<Option<Datagram<'_>>, Skip> {
    loop {
        match ethertype {
            ETHERTYPE_IPV4 => return ipv4(rest),
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => {
                let Some((tag, after)) = rest.split_first_chunk::<4>() else {
                    return Err(truncated("802.1Q/802.1ad tag", 4, rest));
                };
                ethertype = u16::from_be_bytes([tag[2], tag[3]]);
                rest = after;
            }
            _ => return Ok(None),
        }
    }
}

fn ipv4(packet: &[u8]) -> Result<Option<Datagram<'_>>, Skip> {
    let Some((h, _)) = packet.split_first_chunk::<20>() else {
        return Err(truncated("IPv4 header", 20, packet));
    };
    let malformed = |reason| Skip::Malformed {
        layer: "IPv4",
        reason,
    };
    if h[0] >> 4 != 4 {
        return Err(malformed("version field is not 4"));
    }
    let header_len = usize::from(h[0] & 0x0F) * 4;
    if header_len < 20 {
        return Err(malformed("header length (IHL) below 5"));
    }
    if packet.len() < header_len {
        return Err(truncated("IPv4 header with options", header_len, packet));
    }
    let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if total_len < header_len {
        return Err(malformed("total length shorter than the header"));
    }
    if h[9] != IPPROTO_UDP {
        return Ok(None);
    }
    let flags_offset = u16::from_be_bytes([h[6], h[7]]);
    if flags_offset & (IP_MF | IP_OFFSET_MASK) != 0 {
        return Err(Skip::Fragment {
            offset: (flags_offset & IP_OFFSET_MASK) * 8,
            more: flags_offset & IP_MF != 0,
        });
    }
    let Some(udp) = packet.get(header_len..total_len) else {
        return Err(truncated("IPv4 packet", total_len, packet));
    };
    let Some((u, after)) = udp.split_first_chunk::<8>() else {
        return Err(truncated("UDP header", 8, udp));
    };
    let udp_len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    let Some(payload) = udp_len.checked_sub(8).and_then(|n| after.get(..n)) else {
        return Err(Skip::Malformed {
            layer: "UDP",
            reason: "length field below 8 or beyond the IPv4 payload",
        });
    };
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    Ok(Some(Datagram {
        src: SocketAddrV4::new(src, u16::from_be_bytes([u[0], u[1]])),
        dst: SocketAddrV4::new(dst, u16::from_be_bytes([u[2], u[3]])),
        payload,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 4] = [10, 1, 2, 3];
    const DST: [u8; 4] = [233, 54, 12, 111];

    /// An IPv4 + UDP packet with `options` 4-byte words of IP options.
    fn ip_udp(payload: &[u8], options: usize, proto: u8, frag: u16) -> Vec<u8> {
        let ihl = 5 + options;
        let total = ihl * 4 + 8 + payload.len();
        let mut p = vec![(0x40 | ihl) as u8, 0];
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0, 1]);
        p.extend_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&[64, proto, 0, 0]);
        p.extend_from_slice(&SRC);
        p.extend_from_slice(&DST);
        p.extend(std::iter::repeat_n(1u8, options * 4)); // NOP options
        p.extend_from_slice(&4000u16.to_be_bytes());
        p.extend_from_slice(&26477u16.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn ethernet(tags: &[u16], ethertype: u16, inner: &[u8]) -> Vec<u8> {
        let mut f = vec![0x01, 0x00, 0x5e, 0x36, 0x0c, 0x6f, 2, 0, 0, 0, 0, 1];
        for &tpid in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&[0x00, 0x8d]);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(inner);
        f
    }

    fn check(link: LinkType, frame: &[u8], payload: &[u8]) {
        let d = udp_datagram(link, frame).unwrap().unwrap();
        assert_eq!(d.src, SocketAddrV4::new(SRC.into(), 4000));
        assert_eq!(d.dst, SocketAddrV4::new(DST.into(), 26477));
        assert_eq!(d.payload, payload);
    }

    #[test]
    fn ethernet_plain_tagged_and_stacked() {
        let ip = ip_udp(b"hello", 0, 17, 0);
        check(LinkType::ETHERNET, &ethernet(&[], 0x0800, &ip), b"hello");
        check(
            LinkType::ETHERNET,
            &ethernet(&[0x8100], 0x0800, &ip),
            b"hello",
        );
        check(
            LinkType::ETHERNET,
            &ethernet(&[0x88A8, 0x8100], 0x0800, &ip),
            b"hello",
        );
        check(
            LinkType::ETHERNET,
            &ethernet(&[0x88A8, 0x8100, 0x8100], 0x0800, &ip),
            b"hello",
        );
    }

    #[test]
    fn padding_and_options() {
        let mut frame = ethernet(&[], 0x0800, &ip_udp(b"x", 0, 17, 0));
        frame.resize(60, 0xEE);
        frame.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]); // an FCS
        check(LinkType::ETHERNET, &frame, b"x");
        check(LinkType::IPV4, &ip_udp(b"opts", 3, 17, 0), b"opts");
    }

    #[test]
    fn raw_and_cooked_links() {
        let ip = ip_udp(b"raw", 0, 17, 0);
        check(LinkType::RAW, &ip, b"raw");
        check(LinkType::IPV4, &ip, b"raw");

        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        check(LinkType::LINUX_SLL, &sll, b"raw");

        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        check(LinkType::LINUX_SLL2, &sll2, b"raw");
    }

    #[test]
    fn not_udp_ipv4_is_none() {
        let tcp = ip_udp(b"t", 0, 6, 0);
        assert_eq!(udp_datagram(LinkType::IPV4, &tcp), Ok(None));
        assert_eq!(
            udp_datagram(LinkType::ETHERNET, &ethernet(&[], 0x86DD, &[0x60; 48])),
            Ok(None)
        );
        assert_eq!(
            udp_datagram(LinkType::ETHERNET, &ethernet(&[0x8100], 0x0806, &[0; 28])),
            Ok(None)
        );
        assert_eq!(udp_datagram(LinkType::RAW, &[0x60; 40]), Ok(None));
        assert_eq!(udp_datagram(LinkType::IPV6, &[0x60; 40]), Ok(None));
    }

    #[test]
    fn fragments_are_skipped() {
        let first = ip_udp(b"frag", 0, 17, IP_MF);
        assert_eq!(
            udp_datagram(LinkType::IPV4, &first),
            Err(Skip::Fragment {
                offset: 0,
                more: true
            })
        );
        let last = ip_udp(b"frag", 0, 17, 185);
        assert_eq!(
            udp_datagram(LinkType::IPV4, &last),
            Err(Skip::Fragment {
                offset: 1480,
                more: false
            })
        );
        // Don't-fragment alone is not a fragment.
        check(LinkType::IPV4, &ip_udp(b"df", 0, 17, 0x4000), b"df");
    }

    #[test]
    fn truncation_at_every_length_is_a_skip() {
        let frame = ethernet(&[0x88A8, 0x8100], 0x0800, &ip_udp(b"payload", 1, 17, 0));
        for cut in 0..frame.len() {
            match udp_datagram(LinkType::ETHERNET, &frame[..cut]) {
                Err(Skip::Truncated { need, have, .. }) => assert!(have < need),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        check(LinkType::ETHERNET, &frame, b"payload");
    }

    #[test]
    fn malformed_headers() {
        let good = ip_udp(b"abc", 0, 17, 0);
        let mut bad_version = good.clone();
        bad_version[0] = 0x55;
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &bad_version),
            Err(Skip::Malformed { .. })
        ));
        let mut bad_ihl = good.clone();
        bad_ihl[0] = 0x44;
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &bad_ihl),
            Err(Skip::Malformed { .. })
        ));
        let mut short_total = good.clone();
        short_total[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &short_total),
            Err(Skip::Malformed { .. })
        ));
        let mut long_udp = good.clone();
        long_udp[24..26].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &long_udp),
            Err(Skip::Malformed { layer: "UDP", .. })
        ));
        let mut tiny_udp = good.clone();
        tiny_udp[24..26].copy_from_slice(&7u16.to_be_bytes());
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &tiny_udp),
            Err(Skip::Malformed { layer: "UDP", .. })
        ));
        let mut long_total = good;
        long_total[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            udp_datagram(LinkType::IPV4, &long_total),
            Err(Skip::Truncated {
                layer: "IPv4 packet",
                need: 100,
                have: 31
            })
        ));
        assert!(matches!(
            udp_datagram(LinkType::RAW, &[0x20; 30]),
            Err(Skip::Malformed { .. })
        ));
    }

    #[test]
    fn short_udp_length_trims_payload() {
        let mut p = ip_udp(b"abcdef", 0, 17, 0);
        p[24..26].copy_from_slice(&10u16.to_be_bytes());
        check(LinkType::IPV4, &p, b"ab");
    }

    #[test]
    fn stats_count_every_reason() {
        let mut stats = Stats::default();
        let ip = ip_udp(b"s", 0, 17, 0);
        assert!(stats.extract(LinkType::IPV4, &ip).is_some());
        assert!(
            stats
                .extract(LinkType::IPV4, &ip_udp(b"s", 0, 6, 0))
                .is_none()
        );
        assert!(
            stats
                .extract(LinkType::IPV4, &ip_udp(b"s", 0, 17, IP_MF))
                .is_none()
        );
        assert!(stats.extract(LinkType::IPV4, &ip[..10]).is_none());
        assert!(stats.extract(LinkType::IPV4, &[0x41; 30]).is_none());
        assert!(stats.extract(LinkType(147), &ip).is_none());
        assert_eq!(
            stats,
            Stats {
                datagrams: 1,
                not_udp_ipv4: 1,
                fragments: 1,
                truncated: 1,
                malformed: 1,
                unsupported_link: 1
            }
        );
        assert_eq!(stats.skipped(), 5);
        assert_eq!(stats.frames(), 6);
    }

    #[test]
    fn link_type_display() {
        assert_eq!(LinkType::ETHERNET.to_string(), "ETHERNET (1)");
        assert_eq!(LinkType(147).to_string(), "link type 147");
        assert_eq!(
            Skip::UnsupportedLink(LinkType(147)).to_string(),
            "unsupported link type 147"
        );
    }
}
