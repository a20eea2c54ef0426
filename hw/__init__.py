"""Amaranth HDL of the StarPulse 400G compute NIC (rate limiter, CC engine, RoCE parser, ICRC).

Blocks (one Verilog module each, see ``hw.tools.blocks`` and ``starpulse hw verilog``):

* :mod:`hw.sched`  - ``TxScheduler``: per-QP token buckets in a BRAM, work-conserving round-robin, framer
* :mod:`hw.dcqcn`  - ``DcqcnRpEngine``: DCQCN reaction points, bit-exact against ``sw.cc.DcqcnRp``
* :mod:`hw.cnp`    - ``CnpGenerator``: DCQCN notification point, bit-exact against ``sw.cc.DcqcnNp``
* :mod:`hw.parser` - ``RoceParser``: Ethernet/IPv4/UDP/BTH parser raising CE and CNP events
* :mod:`hw.icrc`   - ``IcrcChecker``: full-width RoCEv2 ICRC check; ``IcrcGenerator`` (block ``icrc_gen``):
  appends the ICRC on transmit
* :mod:`hw.int_ack` - ``IntAckParser``: finds INT-echoing RoCE ACKs and streams their hop records (HPCC input)
* :mod:`hw.hpcc`   - ``HpccEngine``: INT/HPCC per-QP window and rate
* :mod:`hw.nic_top` - ``NicCcTop``: the CC top level wiring the parsers, CNP generator, DCQCN RP, HPCC
  engine, scheduler, CSR
* :mod:`hw.csr`    - ``CsrBank``: register bus for rates (clamped with an error flag), counters

Helpers the blocks share are in :mod:`hw.lib` (AXI-Stream signature and skid buffer, split carry adds, skewed
adders, the sequential divider, the ns time base); the block registry, the ``starpulse hw`` CLI, the yosys report
and the worst-path analysis are in :mod:`hw.tools`.
"""
