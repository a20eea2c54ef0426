"""The IPv6 template's UDP checksum: the payload sum (numpy over 32-bit words for large payloads, one integer
below NUMPY_SUM_MIN_BYTES) agrees with a plain word-by-word sum, and whole frames match Scapy's checksum on both
sides of the threshold, for every pad count and for memoryviews into a memory region."""

from __future__ import annotations

import numpy as np
import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame
from sw.roce.wire.template import NUMPY_SUM_MIN_BYTES, FlowTemplates, payload_words_sum

pytestmark = pytest.mark.unit

FLOW6 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "fd00:5350::a00:1", "fd00:5350::a00:2", 0x12, 0x34)


def _reference(data: bytes) -> int:
    padded = data + b"\0" * (-len(data) & 3)
    return sum(int.from_bytes(padded[i:i + 2], "big") for i in range(0, len(padded), 2)) % 0xFFFF


SIZES = [0, 1, 2, 3, 5, NUMPY_SUM_MIN_BYTES - 1, NUMPY_SUM_MIN_BYTES, NUMPY_SUM_MIN_BYTES + 1,
         NUMPY_SUM_MIN_BYTES + 2, NUMPY_SUM_MIN_BYTES + 3, 4096]


@pytest.mark.parametrize("size", SIZES)
def test_payload_words_sum_matches_a_word_by_word_sum(size):
    rng = np.random.default_rng(size)
    region = rng.integers(0, 256, size + 7, dtype=np.uint8)
    for offset in (0, 1, 3):  # memoryviews at any alignment, as a QP slices its memory region
        view = memoryview(region)[offset:offset + size]
        assert payload_words_sum(view) == _reference(bytes(view))
    assert payload_words_sum(b"\xff" * size) == _reference(b"\xff" * size)


@pytest.mark.parametrize("size", SIZES)
def test_ipv6_frames_carry_scapys_udp_checksum_on_both_sides_of_the_threshold(size):
    payload = np.random.default_rng(100 + size).integers(0, 256, size, dtype=np.uint8)
    opcode = Opcode.RDMA_WRITE_ONLY
    frame = FlowTemplates(FLOW6)[opcode].build(9, memoryview(payload), ext=HeaderFields(va=4, rkey=5, dma_len=size))
    assert frame == scapy_frame(FLOW6, opcode, psn=9, payload=payload.tobytes(),
        ext=HeaderFields(va=4, rkey=5, dma_len=size))
    pkt = Ether(frame)
    wire = pkt[UDP].chksum
    del pkt[UDP].chksum
    assert wire != 0 and wire == Ether(bytes(pkt))[UDP].chksum
