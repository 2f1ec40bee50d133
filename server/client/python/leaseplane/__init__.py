"""leaseplane: the Python client of the leaseplane lease plane.

Standard library only. ``Plane`` blocks, ``AsyncPlane`` awaits; both
acquire, release, wait and hold a lease around a block (``plane.lease``)
that waits, renews, watches the events stream and releases. Every refusal
is a ``LeaseplaneError`` subclass with the plane's answer attached.
"""

from ._aio import AsyncHeldLease, AsyncPlane
from ._errors import (ActorMismatch, AgentBusy, Cancelled, Deadlock, Forbidden, Gone, InvalidRequest, LeaseHeld,
                      LeaseLost, LeaseplaneError, LimitExceeded, NotFound, PlaneUnreachable, StaleLease, Suspended,
                      Unauthorized, Unavailable)
from ._plane import (DEFAULT_URL, LEASE_TTL_S, MAX_HOLD_S, RENEW_EVERY_S, Event, EventStream, HeldLease, Lease,
                     Plane)

__version__ = "0.3.0"

__all__ = [
    "Plane", "AsyncPlane", "Lease", "HeldLease", "AsyncHeldLease", "Event", "EventStream",
    "LeaseplaneError", "LeaseHeld", "Deadlock", "Suspended", "LimitExceeded", "Cancelled", "StaleLease",
    "Unauthorized", "ActorMismatch", "Forbidden", "InvalidRequest", "Unavailable", "NotFound", "AgentBusy",
    "Gone", "PlaneUnreachable", "LeaseLost",
    "DEFAULT_URL", "MAX_HOLD_S", "RENEW_EVERY_S", "LEASE_TTL_S",
]
