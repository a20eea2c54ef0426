"""Transports of the collectives: shared memory inside a server; TCP or RoCE RC QPs ($STARPULSE_NET) between servers."""

from .base import HEADER, Request, StreamChannel, Transport
from .roce import RoceTransport
from .shm import ShmTransport
from .tcp import TcpTransport

__all__ = ["HEADER", "Request", "RoceTransport", "ShmTransport", "StreamChannel", "TcpTransport", "Transport"]
