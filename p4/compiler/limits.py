"""This target's limits: exceeding one is an error naming the limit at the construct, never a crash.

Bit widths at most 2048 (``resolve_base``); compile-time integer values
``MAX_CONST_BITS``; register, counter and meter arrays ``MAX_EXTERN_ENTRIES``; header stacks ``MAX_STACK_SIZE``
elements; ``MAX_STATE_SLOTS`` state slots per packet. A parser whose states loop runs at most ``MAX_PARSER_STEPS``
state transitions per packet, then stops with ``error.ParserTimeout`` (the packet goes on to ingress with
``parser_error`` set, as after any parser error in v1model); a loop through states that neither extract nor advance
is warned about at compile time.
"""

MAX_CONST_BITS = 4096
MAX_EXTERN_ENTRIES = 1 << 22
MAX_STACK_SIZE = 4096
MAX_STATE_SLOTS = 1 << 20
MAX_PARSER_STEPS = 16384
