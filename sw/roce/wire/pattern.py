"""The RTL NIC's payload pattern (``hw.tx_frame`` with ``pattern_payload``): the golden model its frames are checked
against, by the cocotb tests and by a receiving host."""

from __future__ import annotations

import numpy as np

PSN_MASK = (1 << 24) - 1


def pattern_payload(qp: int, psn: int, n_bytes: int) -> bytes:
    """Payload of the frame with PSN ``psn`` of QP ``qp``: byte i is ((psn + i) mod 256) xor (qp mod 256)."""
    if not 0 <= psn <= PSN_MASK or qp < 0 or n_bytes < 0:
        raise ValueError(f"pattern_payload: qp {qp} >= 0, psn {psn} in 0..2^24-1, n_bytes {n_bytes} >= 0 needed")
    i = np.arange(n_bytes, dtype=np.uint32)
    return (((psn + i) & 0xFF) ^ (qp & 0xFF)).astype(np.uint8).tobytes()
