"""Schedules of the collectives, written against ``Net`` (post send/recv, wait) and never a transport."""
