"""Mininet emulation of the multi-rail leaf/spine RoCE fabric."""
