"""Congestion-control golden models (pure, deterministic, integer arithmetic the RTL matches bit for bit)."""
