"""The P4 switch process: real interfaces around the embedded v1model pipeline (ports, queues, control socket).

Run it like BMv2's simple_switch (``starpulse p4 switch`` once wired, or ``python -m p4.switch``)::

    python -m p4.switch PROG.p4 -i 1@eth1 -i 2@eth2 --ctl /tmp/s1.sock [--pcap DIR] [--log-file F]
        [--log-level trace|debug|info|warn|error|off] [--cpu-port N] [--priority-queues N] [--commands CMDS]
    python -m p4.switch cli --ctl /tmp/s1.sock [-c CMD ...] [< cmds.txt]     # simple_switch_CLI language

Modules: ``tm`` (traffic manager), ``ports`` (AF_PACKET ports with a receive ring), ``switch`` (``EmbeddedSwitch``,
the event loop), ``pipeline_adapter`` (adapter to ``p4.pipeline`` + compile cache), ``switch_lag`` (its
``sw.clock.lag`` accounting), ``pfc``, ``control`` (JSON-lines control socket and ``ControlClient``), ``shell``
(interactive CLI), ``pcap``, ``trace``, ``cli`` (argument parsing), ``bench``.
Commands beyond simple_switch_CLI: ``port_stats [PORT]``, ``port_stats_reset``, ``set_port_rate PORT RATE``.
"""
