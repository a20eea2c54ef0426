"""The P4 switch process: real interfaces around the embedded v1model pipeline (ports, queues, control socket)."""
