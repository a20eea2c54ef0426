"""RoCEv2 on the wire: opcodes and header layouts, Scapy layers, fast templates and decoder, ICRC, ECN,
INT-MD, GIDs, sample captures."""
