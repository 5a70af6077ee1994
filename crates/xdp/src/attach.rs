//! Attaching the program to an interface through rtnetlink (`IFLA_XDP`),
//! not through a BPF link.
//!
//! A BPF link lives as long as its file descriptor or a pin in bpffs; a
//! program attached through rtnetlink lives as long as the interface, so
//! forwarding goes on after the daemon exits or crashes, with no
//! filesystem to keep pins in (`ip netns exec`, which runs the daemon in
//! a network namespace, mounts its own `/sys` without bpffs). The next
//! daemon finds the program by the interface's attached program id and
//! replaces it atomically (`XDP_FLAGS_REPLACE` with `IFLA_XDP_EXPECTED_FD`,
//! Linux 5.7+): every frame meets either the old program with its tables
//! or the new one with its own, never none. Detaching also names the
//! program it expects, so a daemon never removes a program that is not
//! its own.

use netio::sys::netlink::NetlinkSocket;
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_REQUEST, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkXdp, XdpAttached};
use std::io;
use std::os::fd::RawFd;

/// `XDP_FLAGS_UPDATE_IF_NOEXIST`: attach only where nothing is attached.
const UPDATE_IF_NOEXIST: u32 = 1 << 0;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub const SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver's (native) XDP.
pub const DRV_MODE: u32 = 1 << 2;
/// `XDP_FLAGS_REPLACE`: replace the program `IFLA_XDP_EXPECTED_FD` names.
const REPLACE: u32 = 1 << 4;

/// The program attached to an interface now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachedProgram {
    /// The kernel's id of the program.
    pub prog_id: u32,
    /// Attached in the driver's (native) mode; otherwise generic.
    pub native: bool,
}

/// The mode flag of native (driver) or generic XDP.
pub fn mode_flags(native: bool) -> u32 {
    if native { DRV_MODE } else { SKB_MODE }
}

/// Sends one request and waits for its acknowledgement; the reply
/// messages before it go to `on_reply`.
fn request(
    inner: RouteNetlinkMessage,
    flags: u16,
    mut on_reply: impl FnMut(RouteNetlinkMessage),
) -> io::Result<()> {
    let sock = NetlinkSocket::new(&[])?;
    let mut header = NetlinkHeader::default();
    header.flags = flags | NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = 1;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::from(inner));
    m.finalize();
    let mut out = vec![0u8; m.buffer_len()];
    m.serialize(&mut out);
    sock.send(&out)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let Some(n) = sock.recv(&mut buf, false)? else {
            continue;
        };
        let mut at = 0usize;
        while let Some(raw) = buf.get(at..n) {
            let Ok(b) = NetlinkBuffer::new_checked(raw) else {
                break;
            };
            at += (b.length() as usize).next_multiple_of(4).max(16);
            let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw) else {
                continue;
            };
            match msg.payload {
                NetlinkPayload::Error(e) => {
                    return match e.code {
                        None => Ok(()),
                        Some(c) => Err(io::Error::from_raw_os_error(-c.get())),
                    };
                }
                NetlinkPayload::InnerMessage(r) => on_reply(r),
                NetlinkPayload::Done(_) => return Ok(()),
                _ => {}
            }
        }
    }
}

/// The XDP program attached to interface `ifindex` now (driver or generic
/// mode), if any.
pub fn attached(ifindex: u32) -> io::Result<Option<AttachedProgram>> {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    let mut found = None;
    request(RouteNetlinkMessage::GetLink(m), 0, |r| {
        let RouteNetlinkMessage::NewLink(l) = r else {
            return;
        };
        for a in l.attributes {
            let LinkAttribute::Xdp(xdp) = a else {
                continue;
            };
            let (mut mode, mut id) = (None, None);
            for x in xdp {
                match x {
                    LinkXdp::Attached(XdpAttached::Driver) => mode = Some(true),
                    LinkXdp::Attached(XdpAttached::SocketBuffer) => mode = Some(false),
                    LinkXdp::ProgId(i) => id = Some(i),
                    _ => {}
                }
            }
            if let (Some(native), Some(prog_id)) = (mode, id) {
                found = Some(AttachedProgram { prog_id, native });
            }
        }
    })?;
    Ok(found)
}

fn set_link_xdp(ifindex: u32, xdp: Vec<LinkXdp>) -> io::Result<()> {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.attributes.push(LinkAttribute::Xdp(xdp));
    request(RouteNetlinkMessage::SetLink(m), 0, |_| {})
}

/// Attaches program `prog` to `ifindex` in `mode` ([`mode_flags`]) where
/// no program is attached in any mode (EBUSY otherwise).
pub fn attach_new(ifindex: u32, prog: RawFd, mode: u32) -> io::Result<()> {
    set_link_xdp(
        ifindex,
        vec![LinkXdp::Fd(prog), LinkXdp::Flags(mode | UPDATE_IF_NOEXIST)],
    )
}

/// Replaces program `old` with `prog` on `ifindex` in one step, in the
/// mode `old` runs in; fails (EEXIST) if `old` is no longer the program
/// attached there.
pub fn replace(ifindex: u32, prog: RawFd, old: RawFd, mode: u32) -> io::Result<()> {
    set_link_xdp(
        ifindex,
        vec![
            LinkXdp::Fd(prog),
            LinkXdp::Flags(mode | REPLACE),
            LinkXdp::ExpectedFd(old as u32),
        ],
    )
}

/// Detaches `prog` from `ifindex` (attached in `mode`), only if it is still
/// the program attached there: another program stays.
pub fn detach(ifindex: u32, prog: RawFd, mode: u32) -> io::Result<()> {
    set_link_xdp(
        ifindex,
        vec![
            LinkXdp::Fd(-1),
            LinkXdp::Flags(mode | REPLACE),
            LinkXdp::ExpectedFd(prog as u32),
        ],
    )
}
