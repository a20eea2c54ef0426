"""Interface flags of another network namespace over rtnetlink, without a process per read.

``NetnsLinks(pid)`` opens a ``NETLINK_ROUTE`` socket inside the network namespace of process ``pid`` once (a
short-lived thread enters the namespace with ``setns``, makes the socket and ends; the socket stays bound to that
namespace), and ``carrier()`` dumps its links (``RTM_GETLINK``): interface -> up with carrier (kernel flags
``IFF_UP`` and ``IFF_LOWER_UP``, as ``ip link`` shows them).  The operations poller reads the switches' links this
way every poll, where ``nsenter ... ip link`` cost two processes per switch per poll.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000
RTM_GETLINK = 18
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK = 16
IFLA_IFNAME = 3
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
_NLMSG = struct.Struct("=IHHII")        # nlmsghdr: length, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")      # ifinfomsg: family, type, index, flags, change
_RTA = struct.Struct("=HH")             # rtattr: length, type
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsLinks:
    """An rtnetlink socket in the network namespace of ``pid``; ``carrier()`` reads its links' state."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sock = _socket_in_netns(pid)
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def carrier(self) -> dict[str, bool]:
        """Interface -> UP and LOWER_UP (administratively up, with carrier) in that namespace."""
        self._seq += 1
        req = _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(req), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0)
                       + req)
        out: dict[str, bool] = {}
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, kind, _flags, seq, _pid = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    raise OSError(f"rtnetlink: malformed message of {length} bytes")
                if seq == self._seq:
                    if kind == NLMSG_DONE:
                        return out
                    if kind == NLMSG_ERROR:
                        err = -struct.unpack_from("=i", data, off + _NLMSG.size)[0]
                        raise OSError(err, f"rtnetlink: {os.strerror(err)}")
                    if kind == RTM_NEWLINK:                          # one interface
                        name, flags = _link(data[off + _NLMSG.size:off + length])
                        if name:
                            out[name] = bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
                off += (length + 3) & ~3


def _link(body: bytes) -> tuple[str, int]:
    """(interface name, flags) of an ``RTM_NEWLINK`` message's body."""
    _family, _type, _index, flags, _change = _IFINFO.unpack_from(body, 0)
    off = _IFINFO.size
    while off + _RTA.size <= len(body):
        rlen, rtype = _RTA.unpack_from(body, off)
        if rlen < _RTA.size:
            break
        if rtype == IFLA_IFNAME:
            return body[off + _RTA.size:off + rlen].split(b"\0", 1)[0].decode(), flags
        off += (rlen + 3) & ~3
    return "", flags


def _socket_in_netns(pid: int) -> socket.socket:
    """A ``NETLINK_ROUTE`` socket made inside ``pid``'s network namespace (by a thread that enters it and ends:
    the namespace of this process's other threads never changes)."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into the network namespace of pid {pid}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["sock"] = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        except OSError as exc:
            box["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{pid}", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    sock = box["sock"]
    assert isinstance(sock, socket.socket)
    sock.settimeout(10)
    return sock
