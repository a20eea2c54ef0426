"""The NIC's wire: an AF_PACKET raw socket on one interface (frames in and out as bytes), plus its addresses.

Our own transmitted frames are not read back (PACKET_IGNORE_OUTGOING, or skipped by packet type); frames that
are not addressed to this host are skipped and counted.  The kernel's receive timestamps of each batch's first and
last frame feed the NIC's receive lag accounting, read the cheaper way for the batches the port sees: short ones
(a dilated fabric's usual one frame) as SO_TIMESTAMPNS control messages with each ``recvmsg`` (no extra system
call), long ones by SIOCGSTAMPNS after the first and last frame (two ioctls per batch, nothing per frame).  A UDP
socket bound to port 4791 (never read) keeps the kernel from answering our RoCE packets with ICMP
port-unreachable.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
from dataclasses import dataclass

from sw.clock import Clock
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.pfc import ENV_NIC_PFC
from sw.roce.transport.rules import PATH_MTUS
from sw.roce.wire.gid import (
    GidError,
    fabric_ipv6,
    ip_version,
    path_mtu_headroom_bytes,
    udp_bind_address,
    udp_family,
)
from sw.roce.wire.opcodes import ROCEV2_UDP_DPORT

ETH_P_ALL = 0x0003
PACKET_HOST = 0
PACKET_MULTICAST = 2
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h, Linux >= 4.20
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SIOCGIFADDR = 0x8915
SIOCGIFMTU = 0x8921
SO_TIMESTAMPNS = 35  # asm-generic/socket.h (SO_TIMESTAMPNS_OLD, a 64-bit timespec on 64-bit hosts)
SIOCGSTAMPNS = 0x8907  # linux/sockios.h: kernel receive time of the frame the socket returned last (timespec)
# Measured (scripts/lag_cost_bench.py --nic-micro): a control message per frame costs ~0.4 us more per recvmsg,
# an ioctl ~1.7 us: a batch this long switches to the ioctls ...
STAMP_IOCTL_BATCH = 8
STAMP_CMSG_AFTER = 16  # ... and this many batches of at most 2 frames in a row switch back to control messages
_TIMESPEC = struct.Struct("@ll")
_STAMP_CMSG_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)   # room for one SCM_TIMESTAMPNS control message
MAX_FRAME_BYTES = 65536
ROCE_HEADROOM_BYTES = 20 + 8 + 12 + 16 + 4  # IPv4 + UDP + BTH + RETH + ICRC around one MTU of payload
# RoCE over IPv6 for every NIC a process opens without an explicit ``ip`` (as $STARPULSE_NIC_PFC does for PFC):
# "fabric" = the interface's IPv4 address in the fabric's IPv6 plan (sw.roce.wire.gid.fabric_ipv6), or an IPv6 address.
ENV_NIC_IPV6 = "STARPULSE_NIC_IPV6"


class NicPortError(OSError):
    """The interface cannot be opened (missing, no IPv4 address, not root); says which and why."""

    is_user_error = True


@dataclass
class NicPortCounters:
    rx_frames: int = 0
    tx_frames: int = 0
    tx_errors: int = 0
    outgoing_skipped: int = 0
    not_for_us: int = 0
    rx_kernel_drops: int = 0  # frames the kernel dropped for this socket (receive buffer full); see poll_kernel_drops


def interface_ipv4(ifname: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError as exc:
            raise NicPortError(f"interface {ifname!r} has no IPv4 address ({exc.strerror})") from None
    return socket.inet_ntoa(raw[20:24])


def interface_mtu(ifname: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        raw = fcntl.ioctl(s.fileno(), SIOCGIFMTU, struct.pack("256s", ifname.encode()[:15]))
    return struct.unpack_from("i", raw, 16)[0]


def path_mtu_for(if_mtu: int) -> int:
    """Largest RoCE path MTU (256..4096) whose packets fit in an interface MTU of ``if_mtu``."""
    fitting = [m for m in PATH_MTUS if m + ROCE_HEADROOM_BYTES <= if_mtu]
    if not fitting:
        raise NicPortError(
            f"interface MTU {if_mtu} is too small for RoCE (needs >= {256 + ROCE_HEADROOM_BYTES})"
        )
    return fitting[-1]


def chosen_path_mtu(requested: int | None, largest: int, *, flag: str, dev: str) -> int:
    """The path MTU a QP uses: ``requested`` when it is a RoCE path MTU no larger than ``largest`` (what ``dev``
    carries), ``largest`` when nothing was asked for; a NicPortError naming ``flag`` otherwise."""
    if requested is None:
        return largest
    if requested not in PATH_MTUS or requested > largest:
        raise NicPortError(f"{flag} {requested}: must be one of {PATH_MTUS} and at most {largest} on {dev}")
    return requested


def device_path_mtu(dev: str, ip: str, requested: int | None, *, flag: str) -> int:
    """The path MTU of a QP on interface ``dev`` whose GID is ``ip``: ``requested`` (checked by ``chosen_path_mtu``)
    or the largest RoCE path MTU the interface carries at that IP version's headers."""
    largest = path_mtu_for(interface_mtu(dev) - path_mtu_headroom_bytes(ip))
    return chosen_path_mtu(requested, largest, flag=flag, dev=dev)


def _stamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The SCM_TIMESTAMPNS receive time (CLOCK_REALTIME ns) among a frame's control messages; 0 when absent."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + nsec
    return 0


def keep_other_frame(pkttype: int, frame: bytes, counters: NicPortCounters) -> bool:
    """A received frame not addressed to this host (``pkttype`` not PACKET_HOST): True for a PFC frame (multicast
    01:80:C2:00:00:01, kept and counted as received); else it is counted as our own outgoing or as not for us."""
    if pkttype == PACKET_MULTICAST and frame[12:14] == b"\x88\x08":
        counters.rx_frames += 1
        return True
    if pkttype == PACKET_OUTGOING:
        counters.outgoing_skipped += 1
    else:
        counters.not_for_us += 1
    return False


class RawSocketPort:
    """Frames to and from interface ``ifname`` through one non-blocking AF_PACKET socket."""

    def __init__(
        self, ifname: str, *, rcvbuf_bytes: int = 32 << 20, claim_udp_port: bool = True, ip: str | None = None,
        rx_timestamps: bool = True,
    ) -> None:
        """``ip``: the address (IPv4, or IPv6 from ``sw.roce.wire.gid.interface_ipv6``) the NIC uses; default IPv4.
        ``rx_timestamps``: read the kernel's receive times of each batch's first and last frame (lag accounting)."""
        self.ifname = ifname
        self.counters = NicPortCounters()
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.bind((ifname, 0))
        except OSError as exc:
            raise NicPortError(f"cannot open a raw socket on interface {ifname!r}: {exc.strerror}") from None
        for force, opt in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, rcvbuf_bytes)  # root: beyond net.core.rmem_max
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, opt, rcvbuf_bytes)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass  # older kernel: outgoing frames are skipped by packet type in recv_batch
        sock.setblocking(False)
        self.sock = sock
        # CLOCK_REALTIME ns at which the kernel received the first and last frame of the last batch (0: unknown)
        self.rx_first_ts_ns = 0
        self.rx_last_ts_ns = 0
        self._stamp_cmsg = True     # stamps as control messages (short batches) or by ioctl (long ones)
        self._short_batches = 0     # batches of <= 2 frames in a row, read by ioctl
        self.rx_timestamps = rx_timestamps and self._enable_timestamps()
        self.mac = sock.getsockname()[4].hex(":")
        self.ip = interface_ipv4(ifname) if ip is None else ip
        self.mtu = interface_mtu(ifname)
        self._udp_sink: socket.socket | None = None
        if claim_udp_port:
            try:
                sink = socket.socket(udp_family(self.ip), socket.SOCK_DGRAM)
            except OSError:
                sink = None  # no kernel support for the family: the kernel drops (never answers) our packets
            if sink is not None:
                sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                try:
                    sink.bind(udp_bind_address(self.ip, ifname, ROCEV2_UDP_DPORT))
                    self._udp_sink = sink
                except OSError:
                    sink.close()  # port held by another stack here, or an address the kernel lacks: fine

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
            self.counters.tx_frames += 1
        except OSError:
            self.counters.tx_errors += 1  # like a NIC TX drop: the transport's recovery resends it

    def _enable_timestamps(self) -> bool:
        """Ask the kernel for each frame's receive time as a control message (SO_TIMESTAMPNS); False when it
        offers none."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        return True

    def _ioctl_ts_ns(self) -> int:
        """SIOCGSTAMPNS: the kernel's receive time (CLOCK_REALTIME ns) of the frame the socket returned last (with
        SO_TIMESTAMPNS off); 0 when unknown.  The first call turns the socket's stamps on."""
        try:
            sec, nsec = _TIMESPEC.unpack(fcntl.ioctl(self.sock.fileno(), SIOCGSTAMPNS, bytes(_TIMESPEC.size)))
        except OSError:
            return 0
        return sec * 1_000_000_000 + nsec

    def _set_stamp_cmsg(self, cmsg: bool) -> None:
        """Read stamps as control messages (True) or by ioctl (False); queued frames keep their kernel stamps."""
        if not cmsg:
            self._ioctl_ts_ns()     # the socket's own stamp flag first: turning SO_TIMESTAMPNS off keeps them on
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, int(cmsg))
        except OSError:
            return
        self._stamp_cmsg = cmsg
        self._short_batches = 0

    def recv_batch(self, max_frames: int) -> list[bytes]:
        """Up to ``max_frames`` frames for this host (and PFC frames) waiting now; with ``rx_timestamps``, the
        receive times of the first and last frame read set ``rx_first_ts_ns``/``rx_last_ts_ns``."""
        out = []
        sock = self.sock
        recvfrom, recvmsg = sock.recvfrom, sock.recvmsg
        c = self.counters
        stamps = self.rx_timestamps
        cmsg = stamps and self._stamp_cmsg
        read = 0
        anc: list = []
        first_anc: list = []
        while read < max_frames:
            try:
                if cmsg:       # the stamp comes with the frame; only the first and last are decoded
                    frame, anc, _flags, addr = recvmsg(MAX_FRAME_BYTES, _STAMP_CMSG_BYTES)
                else:
                    frame, addr = recvfrom(MAX_FRAME_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            read += 1
            if read == 1:
                if cmsg:
                    first_anc = anc
                elif stamps:
                    self.rx_first_ts_ns = self._ioctl_ts_ns()
            pkttype = addr[2]
            if pkttype != PACKET_HOST:
                if keep_other_frame(pkttype, frame, c):
                    out.append(frame)
                continue
            c.rx_frames += 1
            out.append(frame)
        if stamps and read:
            if cmsg:
                self.rx_first_ts_ns = _stamp_ns(first_anc)
                self.rx_last_ts_ns = _stamp_ns(anc) if read > 1 else self.rx_first_ts_ns
                if read >= STAMP_IOCTL_BATCH:
                    self._set_stamp_cmsg(False)
            else:
                self.rx_last_ts_ns = self._ioctl_ts_ns() if read > 1 else self.rx_first_ts_ns
                if read > 2:
                    self._short_batches = 0
                else:
                    self._short_batches += 1
                    if self._short_batches >= STAMP_CMSG_AFTER:
                        self._set_stamp_cmsg(True)
        return out

    def wait(self, timeout_ns: int) -> None:
        select.select([self.sock], [], [], max(0.0, timeout_ns / 1e9))

    def poll_kernel_drops(self) -> int:
        """Add the kernel's drop count for this socket (PACKET_STATISTICS; reading resets it) to the counters."""
        try:
            _packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            drops = 0
        self.counters.rx_kernel_drops += drops
        return self.counters.rx_kernel_drops

    def close(self) -> None:
        self.sock.close()
        if self._udp_sink is not None:
            self._udp_sink.close()


def pfc_options(text: str) -> dict[str, int]:
    """SoftNic options of a ``$STARPULSE_NIC_PFC`` value ("PRIO" or "PRIO,XOFF_FRAMES,XON_FRAMES")."""
    parts = text.split(",")
    if len(parts) not in (1, 3) or not all(p.strip().isdigit() for p in parts):
        raise NicPortError(f"${ENV_NIC_PFC}={text!r}: expected PRIO or PRIO,XOFF_FRAMES,XON_FRAMES")
    nums = [int(p) for p in parts]
    opts = {"pfc_priority": nums[0]}
    if len(nums) == 3:
        opts.update(pfc_rx_xoff_frames=nums[1], pfc_rx_xon_frames=nums[2])
    return opts


def env_pfc_options() -> dict[str, int]:
    """SoftNic options of ``$STARPULSE_NIC_PFC`` if set (else none: no PFC), for every NIC a process opens."""
    text = os.environ.get(ENV_NIC_PFC)
    return pfc_options(text) if text else {}


def env_nic_ip(ifname: str) -> str | None:
    """The NIC address ``$STARPULSE_NIC_IPV6`` asks for on ``ifname`` (None when unset: the interface's IPv4)."""
    text = os.environ.get(ENV_NIC_IPV6, "").strip()
    if not text:
        return None
    if text == "fabric":
        return fabric_ipv6(interface_ipv4(ifname))
    try:
        version = ip_version(text)
    except GidError:
        version = 0
    if version != 6:
        raise GidError(f"${ENV_NIC_IPV6}={text!r}: expected 'fabric' or an IPv6 address")
    return text


def open_device(
    ifname: str,
    *,
    line_rate_bps: int,
    cc: str = "none",
    clock: Clock | None = None,
    ip: str | None = None,
    **nic_options: int,
) -> SoftNic:
    """ibv_open_device for our software NIC: a SoftNic on interface ``ifname`` with its MAC and IPv4 address, or
    ``ip`` (e.g. its IPv6 address; else ``$STARPULSE_NIC_IPV6``) (``nic_options``: ``pacer_burst_bytes``,
    ``base_rtt_ns``)."""
    nic_options.update(env_pfc_options())
    if ip is None:
        ip = env_nic_ip(ifname)
    from sw.roce.softnic.native_port import open_port  # it builds on this module: imported here, not above

    port = open_port(ifname, ip=ip)
    return SoftNic(port, mac=port.mac, ip=port.ip, line_rate_bps=line_rate_bps, cc=cc, clock=clock, **nic_options)
