"""Sample RoCEv2 captures: one classic-pcap file per opcode, for Wireshark and for tshark-based tests.

Each file holds the same opcode twice, over IPv4 then IPv6, with fixed illustrative field values
(``SAMPLE_FIELDS``) and a valid ICRC, built by the fast template path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sw.roce.wire.fields import FIELDS_OF_HEADER, HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.opcodes import LAYOUTS, Opcode
from sw.roce.wire.template import FlowTemplates
from sw.units.pcap_file import write_pcap

SAMPLE_SNAPLEN = 65535
SAMPLE_STEP_NS = 1000
SAMPLE_FLOW_V4 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0x000011, 0x000022)
SAMPLE_FLOW_V6 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "fd00::1", "fd00::2", 0x000011, 0x000022)
SAMPLE_PAYLOAD = bytes(range(37))  # 37 bytes: exercises the pad count (3)


def sample_header_fields(opcode: Opcode) -> HeaderFields:
    """The extended-header values written for ``opcode`` (illustrative, each header's own)."""
    headers = LAYOUTS[opcode].headers
    if "AtomicETH" in headers:
        return HeaderFields(va=0x00007F0000000040, rkey=0x00000BAD, swapdt=0x1111222233334444,
                            cmpdt=0x5555666677778888)
    return HeaderFields(va=0x00007F0012345000, rkey=0x00C0FFEE, dma_len=4096, immdt=0xCAFEF00D, syndrome=0x1F,
                        msn=0x000203, orig_rem_dt=0x0123456789ABCDEF)


def sample_psn(opcode: Opcode) -> int:
    return 0x010000 + int(opcode)


def sample_ackreq(opcode: Opcode) -> bool:
    return opcode in (Opcode.SEND_LAST, Opcode.SEND_ONLY, Opcode.RDMA_WRITE_LAST, Opcode.RDMA_WRITE_ONLY)


def sample_payload(opcode: Opcode) -> bytes:
    return SAMPLE_PAYLOAD if LAYOUTS[opcode].has_payload else b""


def sample_fields(opcode: Opcode) -> dict[str, int | bool | bytes]:
    """The field values written for ``opcode`` (tests compare tshark's dissection against these)."""
    ext = sample_header_fields(opcode)
    fields: dict[str, int | bool | bytes] = {"psn": sample_psn(opcode), "ackreq": sample_ackreq(opcode),
                                             "payload": sample_payload(opcode)}
    for header in LAYOUTS[opcode].headers:
        fields.update((name, getattr(ext, name)) for name in FIELDS_OF_HEADER[header])
    return fields


def write_frames(path: Path, frames: Sequence[bytes]) -> None:
    """Write ``frames`` 1 µs apart from t = 0 to a µs pcap, the layout of the sample captures."""
    write_pcap(path, ((i * SAMPLE_STEP_NS, f) for i, f in enumerate(frames)), snaplen=SAMPLE_SNAPLEN)


def pcap_name(opcode: Opcode) -> str:
    """File name of an opcode's capture: ``0x0a_RDMA_WRITE_ONLY.pcap``."""
    return f"0x{int(opcode):02x}_{opcode.name}.pcap"


def write_opcode_pcaps(outdir: Path) -> list[Path]:
    """One pcap per RC opcode and CNP under ``outdir`` (created if missing); returns the paths written."""
    outdir.mkdir(parents=True, exist_ok=True)
    v4, v6 = FlowTemplates(SAMPLE_FLOW_V4), FlowTemplates(SAMPLE_FLOW_V6)
    paths = []
    for opcode in LAYOUTS:
        psn, payload, ext = sample_psn(opcode), sample_payload(opcode), sample_header_fields(opcode)
        frames = [tpl[opcode].build(psn, payload, ackreq=sample_ackreq(opcode), ext=ext) for tpl in (v4, v6)]
        path = outdir / pcap_name(opcode)
        write_frames(path, frames)
        paths.append(path)
    return paths
