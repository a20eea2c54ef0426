"""RoCE tools: the template-vs-Scapy packet benchmark and the perftest-style verbs benchmark (``starpulse roce``
bench/perf drive them)."""
