"""RoCE tools: the ``starpulse roce`` CLI, the template-vs-Scapy benchmark, the perftest-style verbs benchmark."""
