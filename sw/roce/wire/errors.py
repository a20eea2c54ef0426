"""Typed errors for frames that are not well-formed RoCEv2: each says why and at which byte offset."""

from __future__ import annotations


class RoceFormatError(ValueError):
    """Base of every RoCEv2 parse error; bad input, not a bug (the CLI prints it as one line, exit 2)."""

    is_user_error = True
    kind = "malformed"  # the receive paths' drop-reason counter this error counts in

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(f"{reason} (at byte offset {offset})")
        self.reason = reason
        self.offset = offset


class TruncatedFrameError(RoceFormatError):
    """The frame ends before a header or the length its IP/UDP headers announce."""

    kind = "truncated"


class NotRoceError(RoceFormatError):
    """A well-formed frame that is not RoCEv2 (not IP, not UDP, not port 4791, fragmented, ...)."""

    kind = "not_roce"


class BadVersionError(RoceFormatError):
    """An IP version nibble that disagrees with the EtherType, or a BTH transport version other than 0."""

    kind = "bad_version"


class UnsupportedOpcodeError(RoceFormatError):
    """A BTH opcode outside the RC set and CNP (UC/UD/RD and reserved opcodes)."""

    kind = "unsupported_opcode"


class BadLengthError(RoceFormatError):
    """Lengths that disagree: IP vs UDP length, a payload on an opcode that has none, a pad count too big."""

    kind = "bad_length"


class IpChecksumError(RoceFormatError):
    """An IPv4 header whose checksum does not verify (the ICRC does not cover TOS, TTL or the checksum)."""

    kind = "ip_checksum"


class IcrcMismatchError(RoceFormatError):
    """The invariant CRC on the wire is not the one computed over the masked packet."""

    kind = "icrc_mismatch"

    def __init__(self, reason: str, offset: int, *, wire_icrc: int, computed_icrc: int) -> None:
        super().__init__(reason, offset)
        self.wire_icrc = wire_icrc
        self.computed_icrc = computed_icrc


DROP_REASONS = tuple(cls.kind for cls in RoceFormatError.__subclasses__())
"""Every drop-reason counter a receive path keeps (``NicCounters.drop_reasons`` keys), in a fixed order."""
