"""The one JSON-lines framing (``sw.units.jsonl_socket``): lines split across reads, an over-long line refused,
a blocking request/reply over a socket pair."""

from __future__ import annotations

import socket

import pytest

from sw.units.jsonl_socket import JsonLineStream, LineFramer, LineTooLongError, encode_line

pytestmark = pytest.mark.unit


def test_framer_joins_and_splits_reads() -> None:
    framer = LineFramer(max_line_bytes=16)
    assert framer.feed(b'{"a":') == []
    assert framer.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    with pytest.raises(LineTooLongError, match="longer than 16 bytes"):
        framer.feed(b":" * 20)
    assert framer.feed(b"\n") == [b""]             # the partial line was dropped with the error


def test_stream_request_and_reply_over_a_socket_pair() -> None:
    a, b = socket.socketpair()
    with a, b:
        client, server = JsonLineStream(a), JsonLineStream(b)
        client.send({"op": "status"})
        b.sendall(encode_line({"ok": True}) + encode_line({"event": "x"}))
        assert server.recv() == {"op": "status"}
        assert client.recv() == {"ok": True} and client.recv() == {"event": "x"}
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(EOFError):
            client.recv()
