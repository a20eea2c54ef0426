"""Arithmetic and stream helpers the NIC blocks share: AXI-Stream signature and skid buffer, split carry adds,
skewed adders, the sequential divider, the ns time base."""
