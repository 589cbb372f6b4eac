"""What the store refuses about a run: unknown, already there, held by a live writer, or
reopened with another config (``Store.create_run`` / ``Store.resume_run``)."""

from __future__ import annotations

from abserve.store.layout import StoreError


class RunNotFoundError(StoreError, KeyError):
    """No run with that id."""


class RunExistsError(StoreError, ValueError):
    """A run with that id already exists."""


class RunInUseError(StoreError):
    """A run cannot be resumed: it is ``running`` and its owner may be alive.
    ``owner_known_alive``: the owner is a live process on this host (False: on another
    host, seen alive by its heartbeat only, which goes stale if it died)."""

    def __init__(self, message: str, *, owner_known_alive: bool) -> None:
        super().__init__(message)
        self.owner_known_alive = owner_known_alive


class RunConfigError(StoreError, ValueError):
    """A run cannot be resumed with a config that differs from its recorded one."""
