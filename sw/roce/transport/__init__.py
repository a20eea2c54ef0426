"""The RC transport: queue pairs (requester, responder, IBTA rules), verbs objects, SGLs, atomics, connection set-up."""
