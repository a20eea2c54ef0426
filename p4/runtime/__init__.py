"""P4Runtime v1 for the embedded switch: entity translation (``entities``), the gRPC service (``server``) and a
small raw-gRPC client (``client``).  The only part of ``p4`` that imports ``grpc``; messages come from
``p4.p4runtime_proto`` (the PyPI ``p4runtime`` schema in a private descriptor pool)."""
