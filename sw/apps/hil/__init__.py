"""Hardware in the loop: the RTL NIC (``nic_cc_top`` in Verilator under cocotb) bridged onto a live interface.

``model`` builds the Verilator model once, ``cocotb_port`` drives its CSR bus and doorbell inside cocotb,
``bridge_tb`` is the testbench process (AF_PACKET on an interface, the one clock, lag accounting),
``socket_port`` is the host driver's port to it, ``launch`` starts and stops it, ``bench`` and ``cli`` are
``starpulse hil``.  Top layer (``sw.apps``): it joins ``hw`` (the RTL), ``emu`` (namespaces) and ``sw.roce``.
"""
