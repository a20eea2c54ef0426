"""Transports of the collectives: shared memory inside a server, TCP between servers (RoCE RC QPs later)."""

from .base import HEADER, Request, StreamChannel, Transport
from .shm import ShmTransport
from .tcp import TcpTransport

__all__ = ["HEADER", "Request", "ShmTransport", "StreamChannel", "TcpTransport", "Transport"]
