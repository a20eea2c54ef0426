"""Host software of StarPulse Lab: RoCEv2 stack, congestion-control golden models, collectives."""
