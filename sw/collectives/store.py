"""The collectives' rendezvous store: ``sw.units.file_store`` raising the collectives' errors (a bad path is
``CollectiveUserError``, a rank that never shows up ``CollectiveTimeoutError``)."""

from __future__ import annotations

from sw.units.file_store import FileStore

from .errors import CollectiveTimeoutError, CollectiveUserError


class CollectiveStore(FileStore):
    """The rendezvous directory of one collective job."""

    user_error = CollectiveUserError
    timeout_error = CollectiveTimeoutError
