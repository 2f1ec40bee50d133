"""The errors the plane answers, one class per reason."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Type


class LeaseplaneError(Exception):
    """A refusal of the plane, or a failure to talk to it.

    ``reason`` is the plane's reason (such as ``"lease_held"``), ``status``
    the HTTP status (0 when no answer came), ``answer`` the whole JSON
    answer as a dict and ``retry_after`` the seconds of its Retry-After
    header (None without one).
    """

    reason: str = "error"

    def __init_subclass__(cls, reason: str = "", **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if reason:
            cls.reason = reason

    def __init__(self, message: str, *, status: int = 0, answer: Optional[Mapping[str, Any]] = None,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.status = status
        self.answer: Dict[str, Any] = dict(answer or {})
        if "reason" in self.answer:
            self.reason = str(self.answer["reason"])
        self.retry_after = retry_after
        self._read(self.answer)

    def _read(self, answer: Dict[str, Any]) -> None:
        """Sets the fields a subclass reads from the answer."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class LeaseHeld(LeaseplaneError, reason="lease_held"):
    """The resource is held by another agent, or claims of waiters ahead
    stand in the way (then ``holder`` is None and ``claimants`` names them).
    ``wait_ms`` is the back-off the plane advises; ``admitted`` the first
    waiters, in queue order."""

    def _read(self, a: Dict[str, Any]) -> None:
        self.holder: Optional[str] = a.get("holder")
        self.holders: List[str] = list(a.get("holders") or [])
        self.claimants: List[str] = list(a.get("claimants") or [])
        st = a.get("stampede") or {}
        self.wait_ms: int = int(st.get("waitMs", 0) or 0)
        self.admitted: List[str] = list(st.get("admitted") or [])


class Deadlock(LeaseplaneError, reason="deadlock"):
    """Waiting would never end: ``holder`` holds the resource and waits on
    ``waiting_on``; ``cycle`` is the loop of agents and resources. Release
    something you hold and try again."""

    def _read(self, a: Dict[str, Any]) -> None:
        self.holder: Optional[str] = a.get("holder")
        self.waiting_on: Optional[str] = a.get("waitingOn")
        self.cycle: List[str] = list(a.get("cycle") or [])


class Suspended(LeaseplaneError, reason="suspended"):
    """An operator has suspended this agent: nothing is granted to it until
    it is resumed."""


class LimitExceeded(LeaseplaneError, reason="limit_exceeded"):
    """A workspace limit (``limit``, at most ``max``) or a request limit."""

    def _read(self, a: Dict[str, Any]) -> None:
        self.limit: Optional[str] = a.get("limit")
        self.max: Optional[int] = a.get("max")


class Cancelled(LeaseplaneError, reason="cancelled"):
    """A held request ended because the agent released or asked again."""


class StaleLease(LeaseplaneError, reason="stale_lease"):
    """The lease id named is not a live lease of this agent on the resource."""


class Unauthorized(LeaseplaneError, reason="unauthorized"):
    """The key is missing, unknown or revoked."""


class ActorMismatch(LeaseplaneError, reason="actor_mismatch"):
    """An agent key named another agent."""


class Forbidden(LeaseplaneError, reason="forbidden"):
    """The key's role may not do this (an operator route with a workspace key)."""


class InvalidRequest(LeaseplaneError, reason="invalid_request"):
    """The request is malformed; the message names the field."""


class Unavailable(LeaseplaneError, reason="unavailable"):
    """The plane cannot decide now (nothing was granted); retry after
    ``retry_after`` seconds."""


class NotFound(LeaseplaneError, reason="not_found"):
    """No such route or thing."""


class AgentBusy(LeaseplaneError, reason="agent_busy"):
    """An operator's forget of an agent that still holds or waits."""


class Gone(LeaseplaneError, reason="gone"):
    """Events or entries that retention dropped."""


class PlaneUnreachable(LeaseplaneError, ConnectionError, reason="unreachable"):
    """The plane could not be reached (no connection, a cut answer)."""


class LeaseLost(LeaseplaneError, reason="lost"):
    """A lease held with ``plane.lease(...)`` was lost while the block ran:
    revoked (an operator suspended the agent), expired, or the plane could
    not be reached before it lapsed. Raised when the block exits."""


_BY_REASON: Dict[str, Type[LeaseplaneError]] = {c.reason: c for c in (
    LeaseHeld, Deadlock, Suspended, LimitExceeded, Cancelled, StaleLease, Unauthorized, ActorMismatch,
    Forbidden, InvalidRequest, Unavailable, NotFound, AgentBusy, Gone)}


def error_of(status: int, answer: Mapping[str, Any], retry_after: Optional[float]) -> LeaseplaneError:
    """The exception for a refusal answer."""
    reason = str(answer.get("reason", ""))
    cls = _BY_REASON.get(reason, LeaseplaneError)
    msg = str(answer.get("error") or reason or "HTTP %d" % status)
    if reason and reason not in msg:
        msg = "%s: %s" % (reason, msg)
    return cls(msg, status=status, answer=answer, retry_after=retry_after)
