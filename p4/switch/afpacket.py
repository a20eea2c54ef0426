"""Linux AF_PACKET ABI the switch ports use (``linux/if_packet.h``, ``linux/sockios.h``): option numbers, ring
status bits, and the interface MTU query both the receive and the transmit ring size their slots by."""

from __future__ import annotations

import fcntl
import socket
import struct

ETH_P_ALL = 0x0003
ETH_HLEN = 14
VLAN_HLEN = 4
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_OUTGOING = 4
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_TX_RING = 13
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
TP_STATUS_USER = 1              # receive ring: the slot holds a frame for us
TP_STATUS_AVAILABLE = 0         # transmit ring: the slot is ours to fill
TP_STATUS_SEND_REQUEST = 1      # transmit ring: filled, the next send() takes it
TP_STATUS_SENDING = 2           # transmit ring: taken, its skb not yet freed
TP_STATUS_WRONG_FORMAT = 4      # transmit ring: the kernel refused the slot (and stopped there)
TPACKET2_HDR_BYTES = 32         # TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) = TPACKET2_HDRLEN - sizeof(sockaddr_ll)
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SIOCGIFMTU = 0x8921
PAGE_BYTES = 4096


def interface_mtu(sock: socket.socket, ifname: str) -> int:
    """The MTU of ``ifname`` (SIOCGIFMTU); raises OSError when the interface is gone."""
    ifreq = fcntl.ioctl(sock, SIOCGIFMTU, struct.pack("16si12x", ifname.encode(), 0))
    return int(struct.unpack_from("16si", ifreq)[1])


def ring_slot_bytes(mtu: int, overhead_bytes: int) -> int:
    """The smallest power of two >= 2048 holding an MTU-sized frame plus ``overhead_bytes`` (headers, VLAN tag)."""
    slot_bytes = 2048
    while slot_bytes < mtu + overhead_bytes:
        slot_bytes *= 2
    return slot_bytes
