#!/usr/bin/env python3
"""Writes the seeds of the `pipeline_firewall` and `xdp_encoder` fuzz targets.

    python3 fuzz/tools/seeds.py fuzz/seeds

pipeline_firewall: frames for the router of fuzz_targets/pipeline_firewall.rs
(eth0 on port 0, eth1 on port 1, 0.0.0.0/1 via eth0, 100.64.0.0/10 via eth1,
2001:db8:100::/64 on eth1.100, 10.2.0.0/24 on eth2), each meeting one rule
of its stateless or stateful rule set, flows whose reply comes back on the
other port in a second batch, and the `pipeline` target's seeds under both
rule sets. Input layout: flags byte (port, rule set,
two batches, second port), headroom/pieces byte, then the frames, all of one
length.

xdp_encoder: route records (flags, prefix length, next-hop id, address) at
the lengths that exercise the poptrie's direct level, each node level and
/0, nested prefixes, removals and next-hop ids at the top of the id space.
"""

import ipaddress
import os
import struct
import sys

MAC = {0: bytes([2, 0, 0, 0, 0, 1]), 1: bytes([2, 0, 0, 0, 1, 1])}
PEER = bytes([0x0A, 0, 0, 0, 0, 8])


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip4(src, dst, proto, payload, ttl=64):
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    if proto in (6, 17):
        pseudo = s + d + struct.pack("!BBH", 0, proto, len(payload))
        c = csum(pseudo + payload)
        at = 16 if proto == 6 else 6
        payload = payload[:at] + struct.pack("!H", c or 0xFFFF) + payload[at + 2 :]
    elif proto == 1:
        payload = payload[:2] + struct.pack("!H", csum(payload)) + payload[4:]
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0x1234, 0, ttl, proto, 0, s, d)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ip6(src, dst, nh, payload, hlim=64):
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    if nh in (6, 17, 58):
        pseudo = s + d + struct.pack("!IxxxB", len(payload), nh)
        c = csum(pseudo + payload)
        at = {6: 16, 17: 6, 58: 2}[nh]
        payload = payload[:at] + struct.pack("!H", c or 0xFFFF) + payload[at + 2 :]
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), nh, hlim, s, d) + payload


def udp(sport, dport, data=b"fuzz-seed"):
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp(sport, dport, flags, seq=1000, ack=0, data=b""):
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 8192, 0, 0) + data


def icmp_echo(ident=7, seq=1, v6=False):
    return struct.pack("!BBHHH", 128 if v6 else 8, 0, 0, ident, seq) + b"ping"


def eth(port, l3, v6=False):
    return MAC[port] + PEER + (b"\x86\xdd" if v6 else b"\x08\x00") + l3


def batch(frames, port=0, stateful=False, second=None, headroom=8):
    """One input: `frames` on `port`, or with `second` (port, frames) a
    second batch of as many frames on another port."""
    frames = list(frames)
    flags = port
    if stateful:
        flags |= 4
    if second is not None:
        port2, more = second
        assert len(more) == len(frames)
        flags |= 8 | (port2 << 4)
        frames += more
    size = max(len(f) for f in frames)
    frames = [f + bytes(size - len(f)) for f in frames]
    assert 1 <= len(frames) <= 16
    return bytes([flags, headroom | ((len(frames) - 1) << 4)]) + b"".join(frames)


def pipeline_firewall(out):
    A, B = "198.18.0.108", "100.64.1.1"
    frames = {
        # Stateless rule set, from eth0 (port 0).
        "telnet_reject_icmpx": [eth(0, ip4(A, B, 6, tcp(40000, 23, 0x02)))],
        "smtp_tcp_reset": [eth(0, ip4(A, B, 6, tcp(40001, 25, 0x02)))],
        "syn_8080_reject_rst": [eth(0, ip4(A, B, 6, tcp(40002, 8080, 0x02)))],
        "discard_udp_drop": [eth(0, ip4("198.18.0.50", B, 17, udp(5000, 9)))],
        "udp_1500_counter_reject": [eth(0, ip4(A, B, 17, udp(5000, 1500)))],
        "echo_to_cgnat_drop": [eth(0, ip4(A, B, 1, icmp_echo()))],
        "gre_reject_host_unreachable": [eth(0, ip4(A, B, 47, b"\x00\x00\x08\x00" + bytes(20)))],
        "v6_dns_reject_icmpv6": [
            eth(0, ip6("2001:2::108", "2001:db8:100::5", 17, udp(5353, 53)), v6=True)
        ],
        "eth2_sport7_drop": [eth(0, ip4(A, "10.2.0.5", 17, udp(7, 7000, b"x")))],
        "accepted_udp": [eth(0, ip4(A, B, 17, udp(5000, 5001)))],
        "rst_not_answered": [eth(0, ip4(A, B, 6, tcp(40003, 25, 0x14, ack=77)))],
    }
    mixed = [f[0] for f in frames.values()]
    for name, fs in frames.items():
        write(out, name, batch(fs))
    write(out, "stateless_mixed", batch(mixed))
    # Stateful rule set.
    flow = eth(0, ip4(A, B, 17, udp(4000, 5000)))
    reply = eth(1, ip4(B, A, 17, udp(5000, 4000)))
    write(out, "ct_udp_flow_and_reply", batch([flow], stateful=True, second=(1, [reply])))
    syn = eth(0, ip4(A, B, 6, tcp(41000, 80, 0x02, seq=5000)))
    synack = eth(1, ip4(B, A, 6, tcp(80, 41000, 0x12, seq=9000, ack=5001)))
    write(out, "ct_tcp_handshake", batch([syn], stateful=True, second=(1, [synack])))
    inbound_ssh = eth(1, ip4(B, A, 6, tcp(42000, 22, 0x02)))
    inbound_http = eth(1, ip4(B, A, 6, tcp(42001, 80, 0x02)))
    stray_ack = eth(1, ip4(B, A, 6, tcp(42002, 80, 0x10, ack=1)))
    write(out, "ct_inbound_new_and_invalid", batch([inbound_ssh, inbound_http, stray_ack], port=1, stateful=True))
    rejects = [
        eth(0, ip4(A, B, 6, tcp(40004, 23, 0x02))),
        eth(0, ip4(A, B, 17, udp(5000, 9))),
        eth(0, ip6("2001:2::108", "2001:db8:100::5", 58, icmp_echo(v6=True)), v6=True),
    ]
    write(out, "ct_rejects_and_icmpv6", batch(rejects, stateful=True))
    # The `pipeline` target's seeds (same layout), with each rule set.
    base = os.path.join(os.path.dirname(out), "pipeline")
    for name in sorted(os.listdir(base)):
        with open(os.path.join(base, name), "rb") as f:
            data = f.read()
        write(out, f"pipeline-{name}", data)
        write(out, f"pipeline-{name}-ct", bytes([data[0] | 4]) + data[1:])


def record(v6, length, nh, addr, remove=False, high=False):
    flags = int(v6) | (2 if remove else 0) | (4 if high else 0)
    a = ipaddress.ip_address(addr).packed
    return bytes([flags, length]) + struct.pack("<H", nh) + a


def xdp_encoder(out):
    v4_lengths = [0, 1, 8, 16, 17, 18, 19, 23, 24, 25, 29, 30, 31, 32]
    v6_lengths = [0, 3, 16, 17, 22, 23, 32, 48, 57, 63, 64, 65, 96, 121, 124, 127, 128]
    nested4 = b"".join(record(False, l, i + 1, "10.1.2.3") for i, l in enumerate(v4_lengths))
    nested6 = b"".join(record(True, l, i + 1, "2001:db8:1:2:3:4:5:6") for i, l in enumerate(v6_lengths))
    write(out, "nested_v4", b"\x00" + nested4)
    write(out, "nested_v4_from_routes", b"\x02" + nested4)
    write(out, "nested_v6", b"\x00" + nested6)
    write(out, "nested_both_sized", b"\x03" + nested4 + nested6)
    table = b"".join(record(False, 24, i % 40, f"10.{i // 256}.{i % 256}.0") for i in range(120))
    table += b"".join(record(False, 32, 7, f"192.0.2.{i}") for i in range(0, 256, 17))
    write(out, "table_v4", b"\x01" + table)
    write(out, "table_v4_from_routes", b"\x03" + table)
    churn = nested4 + b"".join(
        record(False, l, 0, "10.1.2.3", remove=True) for l in v4_lengths[::2]
    ) + record(False, 24, 99, "10.1.2.3")
    churn += nested6 + b"".join(
        record(True, l, 0, "2001:db8:1:2:3:4:5:6", remove=True) for l in v6_lengths[1::2]
    )
    write(out, "churn_both", b"\x02" + churn)
    high = record(False, 16, 0xFFFE, "172.16.0.0", high=True) + record(False, 20, 0xFFFF, "172.16.0.0", high=True)
    high += record(True, 32, 0xFFFE, "2001:db8::", high=True) + record(True, 40, 0xFFFF, "2001:db8::", high=True)
    high += record(False, 8, 3, "172.0.0.0")
    write(out, "high_next_hops", b"\x00" + high)


def write(folder, name, data):
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1]
    for target, gen in [("pipeline_firewall", pipeline_firewall), ("xdp_encoder", xdp_encoder)]:
        folder = os.path.join(root, target)
        os.makedirs(folder, exist_ok=True)
        gen(folder)


if __name__ == "__main__":
    main()
