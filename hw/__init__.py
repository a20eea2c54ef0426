"""Amaranth HDL of the StarPulse 400G compute NIC (rate limiter, CC engine, RoCE parser, ICRC)."""
