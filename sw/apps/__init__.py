"""The top floor: applications and experiments built on every layer below (benches, self-tests, the demo).

Nothing below imports ``sw.apps``; its modules may import any package (``emu``, ``p4``, ``sw.*``).
"""
