"""Congestion-control golden models (pure, deterministic, integer arithmetic the RTL matches bit for bit).

One model per algorithm, shared by the host stack (``sw.roce`` paces QPs with them) and the FPGA NIC RTL
(``hw/`` checks its CC engine and rate limiter against them):

* :mod:`sw.cc.dcqcn`  - ``DcqcnRp`` (reaction point, per QP) and ``DcqcnNp`` (CNP generation), ``DcqcnParams``
* :mod:`sw.cc.hpcc`   - ``Hpcc`` (INT-driven window/rate sender), ``HpccParams``
* :mod:`sw.cc.base`   - the ``CongestionControl`` protocol, ``NoCc`` baseline, ``IntHop`` / ``AckInfo``
* :mod:`sw.cc.pacer`  - ``TokenBucket`` (the pacer the host stack and the RTL limiter check against) and
  ``CcPacer`` (a bucket whose rate follows a CC model, plus its window): how the host stack paces a QP
* :mod:`sw.cc.stimulus` - seeded random event streams and their replay, for RTL scoreboards
* :mod:`sw.cc.sim`    - a tiny deterministic single-bottleneck discrete-event simulator used by the tests
* :mod:`sw.cc.fixedpoint` - the number formats (units, widths, rounding), documented for the RTL
* :mod:`sw.cc.nic_regs` - the RTL NIC's register map (addresses, counters, parameter table), for hw and drivers

Rules every model follows: time is passed in as integer ns (no clock is read); state updates use Python ints
only (floor division, logical shifts, full-width products, saturating counters of stated width); parameters
are frozen dataclasses with literature defaults, validated on construction (``CcParamError``, a user error).

Number formats (see :mod:`sw.cc.fixedpoint` for the constants):
  rates    u32 kb/s              (1 Mb/s = 1000; 400 Gb/s = 400_000_000)
  time     integer ns            (deadlines are reset_time + k * period)
  alpha    u17 Q1.16             (DCQCN; 65536 = 1.0)
  U, eta   u24 Q8.16 saturating  (HPCC utilisation and target; 65536 = 1.0, eta 0.95 = 62259)
  window   u32 bytes             (HPCC), queue lengths u32 bytes
  pacer    host: credit in units of 1e-9 bit (rate_bps * dt_ns), exact (``TokenBucket``);
           RTL: credit in 2^-24 byte, per-cycle increment (rate_kbps * mult) >> 16 with
           mult = (1000 << 40) // (8 * clk_hz) (``RateToIncrement``, ``CycleTokenBucket``)
"""

from sw.cc.base import AckInfo, CongestionControl, IntHop, NoCc
from sw.cc.dcqcn import DcqcnNp, DcqcnParams, DcqcnRp, RpStage, RpState
from sw.cc.errors import CcError, CcParamError
from sw.cc.hpcc import Hpcc, HpccParams, HpccState
from sw.cc.pacer import CcPacer, CycleTokenBucket, RateToIncrement, TokenBucket
from sw.cc.sim import CcSimResult, SimConfig, simulate

__all__ = [
    "AckInfo", "CcError", "CcPacer", "CcParamError", "CongestionControl", "CycleTokenBucket", "DcqcnNp",
    "DcqcnParams", "DcqcnRp", "Hpcc", "HpccParams", "HpccState", "IntHop", "NoCc", "RateToIncrement", "RpStage",
    "RpState", "CcSimResult", "SimConfig", "TokenBucket", "simulate",
]
