//! The kernel's `netdev` generic-netlink family (Linux 6.3+): which XDP
//! actions a device supports, its `xdp-features`. fastfwd asks it whether
//! a port takes frames redirected from XDP (`ndo-xmit`): a driver without
//! `ndo_xdp_xmit`, or a veth whose peer runs no NAPI (neither GRO nor an
//! XDP program there), drops every frame redirected into it.
//!
//! Requests and replies are built and parsed here, in safe code, with
//! `netlink-packet-generic`'s framing (the family id is resolved through
//! `nlctrl`); the socket is [`netio::NetlinkSocket`]. Replies are read as
//! flat attribute lists (`netlink-packet-core`'s checked iterator): the
//! crate's full `nlctrl` decoder walks nested policy attributes without
//! checking their lengths. Malformed replies are errors, never panics. On older kernels the family does not exist:
//! [`NetdevLink::open`] says so with `Ok(None)`.

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NlasIterator, ParseableParametrized,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};

/// `CTRL_ATTR_FAMILY_ID` (u16) in `nlctrl`'s replies.
const CTRL_ATTR_FAMILY_ID: u16 = 1;
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use std::io;

/// `NETDEV_FAMILY_NAME`, `linux/netdev.h`.
const FAMILY: &str = "netdev";
/// `NETDEV_CMD_DEV_GET`.
const CMD_DEV_GET: u8 = 1;
/// `NETDEV_FAMILY_VERSION`.
const VERSION: u8 = 1;
/// `NETDEV_A_DEV_IFINDEX` (u32).
const A_DEV_IFINDEX: u16 = 1;
/// `NETDEV_A_DEV_XDP_FEATURES` (u64, `enum netdev_xdp_act` bits).
const A_DEV_XDP_FEATURES: u16 = 3;
/// `nlctrl`'s id, `GENL_ID_CTRL`.
const GENL_ID_CTRL: u16 = 0x10;

/// A device's `xdp-features` (`enum netdev_xdp_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpFeatures(pub u64);

impl XdpFeatures {
    /// `NETDEV_XDP_ACT_BASIC`.
    pub const BASIC: u64 = 1;
    /// `NETDEV_XDP_ACT_REDIRECT`.
    pub const REDIRECT: u64 = 2;
    /// `NETDEV_XDP_ACT_NDO_XMIT`: takes frames redirected into it.
    pub const NDO_XMIT: u64 = 4;

    /// Whether frames redirected from XDP into the device are transmitted.
    pub fn takes_redirects(self) -> bool {
        self.0 & Self::NDO_XMIT != 0
    }
}

/// The payload of a generic-netlink message as fastfwd reads it (`netdev`
/// requests and replies, `nlctrl` replies): its command and attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NetdevMessage {
    cmd: u8,
    /// (type, value) of each attribute.
    attrs: Vec<(u16, Vec<u8>)>,
}

impl NetdevMessage {
    fn nlas(&self) -> Vec<DefaultNla> {
        self.attrs
            .iter()
            .map(|(k, v)| DefaultNla::new(*k, v.clone()))
            .collect()
    }
}

impl GenlFamily for NetdevMessage {
    fn family_name() -> &'static str {
        FAMILY
    }

    fn command(&self) -> u8 {
        self.cmd
    }

    fn version(&self) -> u8 {
        VERSION
    }
}

impl Emitable for NetdevMessage {
    fn buffer_len(&self) -> usize {
        self.nlas().as_slice().buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        self.nlas().as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for NetdevMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let mut attrs = Vec::new();
        for nla in NlasIterator::new(buf) {
            let nla = nla?;
            attrs.push((nla.kind(), nla.value().to_vec()));
        }
        Ok(NetdevMessage {
            cmd: header.cmd,
            attrs,
        })
    }
}

fn genl_request<F>(payload: F, family: u16, seq: u32) -> Vec<u8>
where
    F: GenlFamily + Emitable + std::fmt::Debug,
{
    let mut genl = GenlMessage::from_payload(payload);
    genl.set_resolved_family_id(family);
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(genl));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// Asks `nlctrl` for the `netdev` family's id.
pub fn family_request(seq: u32) -> Vec<u8> {
    genl_request(
        GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY.into())],
        },
        GENL_ID_CTRL,
        seq,
    )
}

/// Asks the `netdev` family (id `family`) about device `ifindex`.
pub fn dev_get_request(family: u16, ifindex: u32, seq: u32) -> Vec<u8> {
    genl_request(
        NetdevMessage {
            cmd: CMD_DEV_GET,
            attrs: vec![(A_DEV_IFINDEX, ifindex.to_ne_bytes().to_vec())],
        },
        family,
        seq,
    )
}

/// What one reply datagram said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<T> {
    /// The answer.
    Answer(T),
    /// The kernel's error (a positive errno): ENOENT for a family or
    /// device that does not exist.
    Error(i32),
}

/// The errno of an NLMSG_ERROR body (0: an acknowledgement).
fn error_code(body: &[u8]) -> Result<i32, String> {
    let code = body
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes)
        .ok_or("a truncated error message")?;
    Ok(code.checked_neg().unwrap_or(i32::MAX))
}

/// The family id in `nlctrl`'s reply to [`family_request`] with `seq`.
pub fn parse_family_reply(buf: &[u8], seq: u32) -> Result<Reply<u16>, String> {
    for (ty, _flags, s, body) in crate::netlink::messages(buf) {
        if s != seq {
            continue;
        }
        match ty {
            netlink_packet_core::NLMSG_ERROR => {
                let code = error_code(body)?;
                if code != 0 {
                    return Ok(Reply::Error(code));
                }
            }
            GENL_ID_CTRL => {
                let m = GenlMessage::<NetdevMessage>::parse_with_param(body, ty)
                    .map_err(|e| format!("nlctrl reply: {e}"))?;
                let (_, id) = m
                    .payload
                    .attrs
                    .iter()
                    .find(|(k, _)| *k == CTRL_ATTR_FAMILY_ID)
                    .ok_or("nlctrl reply without a family id")?;
                let id: [u8; 2] = id
                    .as_slice()
                    .try_into()
                    .map_err(|_| format!("nlctrl reply: a family id of {} bytes", id.len()))?;
                return Ok(Reply::Answer(u16::from_ne_bytes(id)));
            }
            _ => {}
        }
    }
    Err("no reply to the family request".into())
}

/// The device's `xdp-features` in the `netdev` family's (id `family`)
/// reply to [`dev_get_request`] with `seq`.
pub fn parse_dev_reply(buf: &[u8], family: u16, seq: u32) -> Result<Reply<XdpFeatures>, String> {
    for (ty, _flags, s, body) in crate::netlink::messages(buf) {
        if s != seq {
            continue;
        }
        if ty == netlink_packet_core::NLMSG_ERROR {
            let code = error_code(body)?;
            if code != 0 {
                return Ok(Reply::Error(code));
            }
        } else if ty == family {
            let m = GenlMessage::<NetdevMessage>::parse_with_param(body, ty)
                .map_err(|e| format!("netdev reply: {e}"))?;
            let (_, value) = m
                .payload
                .attrs
                .iter()
                .find(|(k, _)| *k == A_DEV_XDP_FEATURES)
                .ok_or("netdev reply without xdp-features")?;
            let bytes: [u8; 8] = value
                .as_slice()
                .try_into()
                .map_err(|_| format!("netdev reply: xdp-features of {} bytes", value.len()))?;
            return Ok(Reply::Answer(XdpFeatures(u64::from_ne_bytes(bytes))));
        }
    }
    Err("no reply to the device request".into())
}

/// A socket asking the `netdev` family about devices.
#[derive(Debug)]
pub struct NetdevLink {
    sock: netio::NetlinkSocket,
    family: u16,
    seq: u32,
    buf: Vec<u8>,
}

/// How long a reply may take before the question is given up.
const REPLY_WAIT_MS: i32 = 1000;

impl NetdevLink {
    /// Opens the socket and resolves the family; `Ok(None)` when the
    /// kernel has no `netdev` family (before 6.3).
    pub fn open() -> io::Result<Option<NetdevLink>> {
        let mut link = NetdevLink {
            sock: netio::NetlinkSocket::generic()?,
            family: 0,
            seq: 1,
            buf: vec![0; 16 << 10],
        };
        let seq = link.seq;
        let n = link.ask(&family_request(seq))?;
        match parse_family_reply(&link.buf[..n], seq).map_err(io::Error::other)? {
            Reply::Answer(id) => {
                link.family = id;
                Ok(Some(link))
            }
            Reply::Error(libc::ENOENT) => Ok(None),
            Reply::Error(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Sends `req` and waits (bounded) for the reply datagram.
    fn ask(&mut self, req: &[u8]) -> io::Result<usize> {
        self.sock.send(req)?;
        loop {
            if netio::sys::os::poll_readable(&[self.sock.fd()], REPLY_WAIT_MS)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply from the kernel's netdev family",
                ));
            }
            if let Some(n) = self.sock.recv(&mut self.buf, true)? {
                return Ok(n);
            }
        }
    }

    /// Device `ifindex`'s `xdp-features`; `Ok(None)` when there is no such
    /// device.
    pub fn xdp_features(&mut self, ifindex: u32) -> io::Result<Option<XdpFeatures>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        loop {
            let n = self.ask(&dev_get_request(self.family, ifindex, seq))?;
            // A late reply to an earlier question is skipped.
            match parse_dev_reply(&self.buf[..n], self.family, seq) {
                Ok(Reply::Answer(f)) => return Ok(Some(f)),
                Ok(Reply::Error(libc::ENODEV)) => return Ok(None),
                Ok(Reply::Error(e)) => return Err(io::Error::from_raw_os_error(e)),
                Err(e) if e.starts_with("no reply") => continue,
                Err(e) => return Err(io::Error::other(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as the kernel frames it: netlink header, genl header, attrs.
    fn reply(ty: u16, seq: u32, cmd: u8, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![cmd, 1, 0, 0];
        for (kind, value) in attrs {
            let len = 4 + value.len();
            body.extend_from_slice(&(len as u16).to_ne_bytes());
            body.extend_from_slice(&kind.to_ne_bytes());
            body.extend_from_slice(value);
            body.resize(body.len().next_multiple_of(4), 0);
        }
        let mut m = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&body);
        m
    }

    fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut m = 36u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&netlink_packet_core::NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-errno).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        m
    }

    #[test]
    fn requests_are_framed_for_their_families() {
        let r = family_request(7);
        assert_eq!(
            u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize,
            r.len()
        );
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), GENL_ID_CTRL);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().unwrap()), 7);
        assert_eq!(r[16], 3, "CTRL_CMD_GETFAMILY");
        assert!(r.windows(7).any(|w| w == b"netdev\0"));
        let d = dev_get_request(29, 0x0102_0304, 8);
        assert_eq!(u16::from_ne_bytes([d[4], d[5]]), 29);
        assert_eq!((d[16], d[17]), (CMD_DEV_GET, VERSION));
        // One attribute: length 8, type ifindex, the value.
        assert_eq!(&d[20..22], &8u16.to_ne_bytes());
        assert_eq!(&d[22..24], &A_DEV_IFINDEX.to_ne_bytes());
        assert_eq!(&d[24..28], &0x0102_0304u32.to_ne_bytes());
        assert_eq!(d.len(), 28);
    }

    #[test]
    fn replies_give_the_family_and_the_features() {
        let fam = reply(
            GENL_ID_CTRL,
            3,
            1,
            &[(1, 29u16.to_ne_bytes().to_vec()), (2, b"netdev\0".to_vec())],
        );
        assert_eq!(parse_family_reply(&fam, 3), Ok(Reply::Answer(29)));
        assert!(
            parse_family_reply(&fam, 4).is_err(),
            "another question's reply"
        );
        assert_eq!(
            parse_family_reply(&error(3, libc::ENOENT), 3),
            Ok(Reply::Error(libc::ENOENT))
        );
        let dev = |features: u64| {
            reply(
                29,
                5,
                CMD_DEV_GET,
                &[
                    (A_DEV_IFINDEX, 4u32.to_ne_bytes().to_vec()),
                    (A_DEV_XDP_FEATURES, features.to_ne_bytes().to_vec()),
                ],
            )
        };
        let with = parse_dev_reply(&dev(0x7f), 29, 5).unwrap();
        assert_eq!(with, Reply::Answer(XdpFeatures(0x7f)));
        let Reply::Answer(f) = with else {
            unreachable!()
        };
        assert!(f.takes_redirects());
        let Reply::Answer(f) = parse_dev_reply(&dev(0x23), 29, 5).unwrap() else {
            panic!()
        };
        assert!(!f.takes_redirects(), "basic, redirect, rx-sg: no ndo-xmit");
        assert_eq!(
            parse_dev_reply(&error(5, libc::ENODEV), 29, 5),
            Ok(Reply::Error(libc::ENODEV))
        );
        // Malformed: no features, a short value, a truncated error.
        let none = reply(29, 5, CMD_DEV_GET, &[(A_DEV_IFINDEX, vec![4, 0, 0, 0])]);
        assert!(parse_dev_reply(&none, 29, 5).is_err());
        let short = reply(29, 5, CMD_DEV_GET, &[(A_DEV_XDP_FEATURES, vec![1, 2])]);
        assert!(parse_dev_reply(&short, 29, 5).is_err());
        let mut cut = error(5, 1);
        cut.truncate(18);
        assert!(parse_dev_reply(&cut, 29, 5).is_err());
    }
}
