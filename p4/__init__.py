"""P4_16 (v1model) switch programs and the embedded BMv2-compatible software target."""
