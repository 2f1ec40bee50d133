"""The asyncio client: the same calls as Plane, awaited."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Dict, Optional

from ._plane import RENEW_EVERY_S, Event, HeldLease, Lease, Plane


class AsyncPlane:
    """Plane for asyncio: ``await plane.acquire(...)``, ``async with
    plane.lease(...) as lease:``. Each call runs the blocking client in a
    worker thread (``asyncio.to_thread``), so held requests and the
    background renewals never block the event loop."""

    def __init__(self, url: Optional[str] = None, key: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.sync = Plane(url, key, timeout=timeout)

    @property
    def url(self) -> str:
        return self.sync.url

    async def acquire(self, resource: str, actor: str, mode: Optional[str] = None, wait: float = 0) -> Lease:
        return await asyncio.to_thread(self.sync.acquire, resource, actor, mode, wait)

    async def release(self, resource: str, actor: str, lease_id: Optional[str] = None) -> bool:
        return await asyncio.to_thread(self.sync.release, resource, actor, lease_id)

    async def wait(self, prefix: Optional[str] = None, after: Optional[str] = None,
                   limit: Optional[int] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.wait, prefix, after, limit)

    async def events(self, actor: Optional[str] = None, prefix: Optional[str] = None,
                     after: Optional[int] = None) -> AsyncIterator[Event]:
        """The events stream as an async iterator (closed when the loop
        leaves it)."""
        stream = self.sync.events(actor, prefix, after)
        it = iter(stream)
        done = object()
        try:
            while True:
                ev = await asyncio.to_thread(next, it, done)
                if ev is done:
                    return
                yield ev  # type: ignore[misc]
        finally:
            stream.close()

    def lease(self, resource: str, actor: str, mode: Optional[str] = None, timeout: Optional[float] = None,
              *, renew_every: float = RENEW_EVERY_S,
              on_lost: Optional[Callable[[HeldLease], None]] = None) -> "AsyncHeldLease":
        """Plane.lease for ``async with``: the same waiting, renewing,
        watching and releasing."""
        return AsyncHeldLease(self.sync.lease(resource, actor, mode, timeout, renew_every=renew_every,
                                              on_lost=on_lost))


class AsyncHeldLease:
    """What ``async with plane.lease(...)`` holds: the HeldLease's fields,
    plus ``await lease.until_lost()``."""

    def __init__(self, held: HeldLease) -> None:
        self.held = held

    def __getattr__(self, name: str) -> Any:
        return getattr(self.held, name)

    async def until_lost(self) -> str:
        """Wait until the lease is lost; returns why."""
        await asyncio.to_thread(self.held.lost_event.wait)
        return self.held.lost_reason or ""

    async def __aenter__(self) -> "AsyncHeldLease":
        await asyncio.to_thread(self.held.__enter__)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await asyncio.to_thread(self.held.__exit__, exc_type, exc, tb)
