#!/usr/bin/env python3
"""Captures real rtnetlink datagrams as seeds for the `netlink` fuzz target.

Run as root in a network namespace of its own, so nothing outside changes:

    unshare -n python3 fuzz/tools/netlink-seeds.py fuzz/seeds/netlink

It builds a small router in the namespace (two veth pairs, IPv4 and
IPv6 addresses, permanent neighbours, nexthop objects and groups, unicast,
multipath, discarding and nexthop-object routes) while listening to the
groups fastfwd follows, then dumps links, addresses, routes, neighbours and
nexthops, and provokes an error answer. Every datagram the kernel sends is
written as one file, named after the message types it holds (a
notification of the same types and size as one already written is skipped).
"""

import os
import socket
import struct
import subprocess
import sys

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NAMES = {
    2: "error", 3: "done", 16: "newlink", 17: "dellink", 20: "newaddr",
    21: "deladdr", 24: "newroute", 25: "delroute", 28: "newneigh",
    29: "delneigh", 104: "newnexthop", 105: "delnexthop",
}
# RTNLGRP_*: LINK, NEIGH, IPV4_IFADDR, IPV4_ROUTE, IPV6_IFADDR, IPV6_ROUTE, NEXTHOP
GROUPS = [1, 3, 5, 7, 9, 11, 32]

SETUP = """
ip link set lo up
ip link add d0 type veth peer name p0
ip link add d1 type veth peer name p1
ip link set d0 address 02:00:00:00:00:10
ip link set d1 address 02:00:00:00:01:10 mtu 1400
ip link set d0 up
ip link set p0 up
ip link set d1 up
ip link set p1 up
ip addr add 198.18.0.10/24 dev d0
ip addr add 198.19.0.10/24 dev d1
ip -6 addr add 2001:db8::10/64 dev d0 nodad
ip -6 addr add 2001:db8:1::10/64 dev d1 nodad
ip neigh add 198.18.0.108 lladdr 02:00:00:00:00:08 dev d0 nud permanent
ip neigh add 198.19.0.108 lladdr 02:00:00:00:01:08 dev d1 nud reachable
ip -6 neigh add 2001:db8::108 lladdr 02:00:00:00:00:08 dev d0 nud permanent
ip neigh add 198.19.0.109 dev d1 nud incomplete
ip route add 10.1.0.0/16 via 198.18.0.108
ip route add 10.2.0.0/16 nexthop via 198.18.0.108 dev d0 nexthop via 198.19.0.108 dev d1 weight 3
ip route add blackhole 10.3.0.0/16
ip route add unreachable 10.4.0.0/16
ip route add prohibit 10.5.0.0/16
ip route add throw 10.6.0.0/16
ip route add 10.7.0.0/16 via 198.19.0.108 metric 50
ip route add 10.7.0.0/16 via 198.18.0.108 metric 10
ip route add 10.8.0.0/16 via 198.18.0.108 table 100
ip -6 route add 2001:db8:f::/48 via 2001:db8:1::108
ip -6 route add 2001:db8:e::/48 nexthop via 2001:db8::108 dev d0 nexthop via 2001:db8:1::108 dev d1
ip -6 route add blackhole 2001:db8:d::/48
ip route add 10.9.0.0/16 via inet6 2001:db8::108 dev d0
ip nexthop add id 1 via 198.18.0.108 dev d0
ip nexthop add id 2 via 198.19.0.108 dev d1
ip nexthop add id 3 group 1/2,3
ip nexthop add id 4 blackhole
ip nexthop add id 5 via 2001:db8::108 dev d0
ip route add 10.11.0.0/16 nhid 1
ip route add 10.12.0.0/16 nhid 3
ip route add 10.13.0.0/16 nhid 4
ip -6 route add 2001:db8:c::/48 nhid 5
"""

TEARDOWN = """
ip route del 10.12.0.0/16
ip nexthop del id 3
ip -6 route del 2001:db8:f::/48
ip neigh del 198.18.0.108 dev d0
ip -6 addr del 2001:db8:1::10/64 dev d1
ip link set d1 down
ip link del d1
"""


def nl_socket():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind((0, 0))
    return s


def types_of(buf):
    out, at = [], 0
    while at + 16 <= len(buf):
        length, ty = struct.unpack_from("=IH", buf, at)
        if length < 16:
            break
        out.append(NAMES.get(ty, str(ty)))
        at += (length + 3) & ~3
    return out


class Sink:
    def __init__(self, folder):
        self.folder = folder
        self.n = 0
        self.seen = set()

    def save(self, kind, buf):
        types = types_of(buf)
        if kind == "notify":
            shape = (tuple(types), len(buf))
            if shape in self.seen:
                return
            self.seen.add(shape)
        first = types[0] if types else "empty"
        name = f"{kind}-{self.n:03d}-{first}" + (f"-x{len(types)}" if len(types) > 1 else "")
        with open(os.path.join(self.folder, name), "wb") as f:
            f.write(buf)
        self.n += 1


def drain(s, sink, kind):
    s.setblocking(False)
    while True:
        try:
            buf = s.recv(1 << 20)
        except BlockingIOError:
            break
        sink.save(kind, buf)
    s.setblocking(True)


def run(script, mon, sink, kind):
    for line in script.strip().splitlines():
        r = subprocess.run(line.split(), capture_output=True, text=True)
        if r.returncode != 0:
            print(f"skipped ({r.stderr.strip()}): {line}", file=sys.stderr)
        drain(mon, sink, kind)


def dump(s, ty, body, seq, sink):
    msg = struct.pack("=IHHII", 16 + len(body), ty, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body
    s.send(msg)
    while True:
        buf = s.recv(1 << 20)
        sink.save("dump", buf)
        if "done" in types_of(buf) or "error" in types_of(buf):
            return


def main():
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    sink = Sink(folder)
    mon = nl_socket()
    for g in GROUPS:
        mon.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, g)
    run(SETUP, mon, sink, "notify")
    s = nl_socket()
    for seq, (ty, body) in enumerate(
        [(18, bytes(16)), (22, bytes(8)), (26, bytes(12)), (30, bytes(12)), (106, bytes(8))], 1
    ):
        dump(s, ty, body, seq, sink)
    # An error answer: deleting a route that does not exist, with an ack.
    body = bytes([2, 16, 0, 0, 254, 4, 0, 1]) + bytes(4)
    body += struct.pack("=HH", 8, 1) + bytes([10, 99, 0, 0])
    s.send(struct.pack("=IHHII", 16 + len(body), 25, NLM_F_REQUEST | NLM_F_ACK, 99, 0) + body)
    sink.save("answer", s.recv(1 << 16))
    run(TEARDOWN, mon, sink, "notify")


if __name__ == "__main__":
    main()
