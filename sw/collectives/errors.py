"""Errors of the collectives library: user mistakes carry ``is_user_error = True`` (one clear line, no traceback)."""

from __future__ import annotations


class CollectiveUserError(ValueError):
    """Bad input from the caller: a wrong dtype, size, algorithm name, rank or environment value.  Raised by the
    call itself before anything runs, so the communicator stays usable (unlike its subclass below)."""

    is_user_error = True


class CollectiveMismatchError(CollectiveUserError):
    """Ranks called different collectives, or the same one with different sizes/dtypes (seen on the wire while
    the operation runs: the communicator is aborted afterwards)."""


class CollectiveTimeoutError(TimeoutError):
    """A peer did not answer within the communicator's timeout (dead or stuck rank); names the wait and peer."""

    is_user_error = False
    is_runtime_failure = True   # one line and exit 1 from an entry point: a failed run, not a bug


class PeerGoneError(ConnectionError):
    """A peer closed its connection in the middle of a collective (the rank exited or crashed)."""

    is_user_error = False
    is_runtime_failure = True   # one line and exit 1 from an entry point: a failed run, not a bug


class CommAbortedError(RuntimeError):
    """The communicator failed earlier (timeout, dead peer, mismatch); later calls refuse to run on it."""

    is_user_error = False
    is_runtime_failure = True   # one line and exit 1 from an entry point: a failed run, not a bug
