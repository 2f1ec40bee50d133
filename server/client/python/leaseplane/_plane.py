"""The blocking client: Plane, Lease, HeldLease and the events stream."""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, Iterator, Mapping, Optional, Tuple, TypeVar, cast

from ._errors import (LeaseHeld, LeaseLost, LeaseplaneError, PlaneUnreachable, Unavailable, error_of)

DEFAULT_URL = "http://127.0.0.1:8080"
#: The longest the plane holds one lease request (waitUpToMs at most 30000).
MAX_HOLD_S = 30.0
#: How often a held lease is renewed: a third of its 30 s lifetime.
RENEW_EVERY_S = 10.0
#: A lease's lifetime from its grant or last renewal.
LEASE_TTL_S = 30.0

T = TypeVar("T")

_ENDS = ("coordination.release", "coordination.expire", "coordination.revoke")


@dataclass(frozen=True)
class Lease:
    """A granted lease. Pass ``fence`` downstream as a fencing token."""

    id: str
    resource: str
    holder: str
    mode: str
    fence: int
    granted_at_ms: int
    expires_at_ms: int

    @classmethod
    def _of(cls, d: Mapping[str, Any]) -> "Lease":
        return cls(id=d["id"], resource=d["resource"], holder=d["holder"], mode=d["mode"], fence=int(d["fence"]),
                   granted_at_ms=int(d["grantedAtMs"]), expires_at_ms=int(d["expiresAtMs"]))


@dataclass(frozen=True)
class Event:
    """One event of the events stream: ``id`` is its ledger index, ``data``
    the bytes of its ledger entry, ``fields`` those bytes parsed."""

    id: int
    type: str
    data: bytes
    fields: Dict[str, Any] = field(default_factory=dict)

    @property
    def resource(self) -> Optional[str]:
        return self.fields.get("resource")

    @property
    def actor(self) -> Optional[str]:
        return self.fields.get("actorDid")

    @property
    def lease_id(self) -> Optional[str]:
        return self.fields.get("leaseId")

    @property
    def ends_lease(self) -> bool:
        """True for a release, an expiry or a revocation."""
        return self.type in _ENDS


class Plane:
    """A client of one lease plane with one key.

    ``url`` and ``key`` default to the environment's ``LEASEPLANE_URL``
    (else http://127.0.0.1:8080) and ``LEASEPLANE_KEY``. ``timeout`` bounds
    each request that the plane does not hold. Safe to share between
    threads: every request has its own connection.
    """

    def __init__(self, url: Optional[str] = None, key: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("LEASEPLANE_URL") or DEFAULT_URL).rstrip("/")
        self.key = key if key is not None else os.environ.get("LEASEPLANE_KEY", "")
        self.timeout = timeout
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("leaseplane: url %r is not http(s)://host[:port]" % self.url)
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._base = u.path.rstrip("/")

    # -- HTTP --------------------------------------------------------------

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self) -> Dict[str, str]:
        h = {"Accept": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        return h

    def _request(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
                 timeout: Optional[float] = None) -> Tuple[int, Dict[str, Any], Optional[float]]:
        conn = self._connect(timeout if timeout is not None else self.timeout)
        data = None if body is None else json.dumps(body).encode()
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, self._base + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            ra = resp.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as e:
            raise PlaneUnreachable("could not reach the plane at %s: %s" % (self.url, e)) from e
        finally:
            conn.close()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise LeaseplaneError("%s %s: HTTP %d answered no JSON object: %r" % (method, path, resp.status, raw[:200]),
                                  status=resp.status)
        retry_after = None
        if ra is not None:
            try:
                retry_after = float(ra)
            except ValueError:
                pass
        return resp.status, answer, retry_after

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        status, answer, retry_after = self._request(method, path, body, timeout)
        if status != 200 or answer.get("ok") is not True:
            raise error_of(status, answer, retry_after)
        return answer

    # -- the lease routes --------------------------------------------------

    def acquire(self, resource: str, actor: str, mode: Optional[str] = None, wait: float = 0) -> Lease:
        """Take (or renew) the lease on ``resource`` for agent ``actor``.

        ``mode`` is ``"read"``, ``"write"`` or ``"delete"``; None asks write
        for a new lease and keeps the held mode on a renewal. With ``wait``
        seconds (``math.inf`` for no limit), the plane holds the request
        until the lease is free for this agent (one held request per 30 s,
        no polling) and ``LeaseHeld`` is raised only when the time is up.
        Raises ``LeaseHeld``, ``Deadlock``, ``Suspended`` or another
        ``LeaseplaneError``.
        """
        body: Dict[str, Any] = {"resource": resource, "actorDid": actor}
        if mode is not None:
            body["mode"] = mode
        if wait < 0:
            raise ValueError("leaseplane: wait=%r is negative" % wait)
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            hold = min(left, MAX_HOLD_S) if wait > 0 else 0.0
            hold_ms = max(0, int(hold * 1000))
            path = "/api/v1/acp/coordination/lease"
            if hold_ms > 0:
                path += "?waitUpToMs=%d" % hold_ms
            sent = time.monotonic()
            try:
                return Lease._of(self._call("POST", path, body, timeout=self.timeout + hold_ms / 1000)["lease"])
            except (LeaseHeld, Unavailable) as e:
                left = deadline - time.monotonic()
                if wait <= 0 or left <= 0:
                    raise
                if isinstance(e, Unavailable):
                    pause = e.retry_after or 1.0
                elif time.monotonic() - sent >= hold_ms / 1000:
                    pause = 0.0  # held to its end: ask again at once
                else:
                    pause = (e.wait_ms or 50) / 1000  # answered early: follow the back-off
                if pause > 0:
                    time.sleep(min(pause, left))

    def release(self, resource: str, actor: str, lease_id: Optional[str] = None) -> bool:
        """Give back ``actor``'s lease on ``resource`` (only ``lease_id``, when
        given: a lease id that is not live raises ``StaleLease``) and stop
        its wait there. True when a lease was released."""
        body: Dict[str, Any] = {"resource": resource, "actorDid": actor}
        if lease_id is not None:
            body["leaseId"] = lease_id
        return bool(self._call("POST", "/api/v1/acp/coordination/release", body).get("released"))

    def wait(self, prefix: Optional[str] = None, after: Optional[str] = None,
             limit: Optional[int] = None) -> Dict[str, Any]:
        """The queues (holders and waiters per resource) and the recent
        deadlocks, as the plane answers them: ``{"ok", "nowMs", "queues",
        "deadlocks", "next"?}``."""
        q = {k: v for k, v in (("prefix", prefix), ("after", after), ("limit", limit)) if v is not None}
        path = "/api/v1/acp/coordination/wait"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        return self._call("GET", path)

    def events(self, actor: Optional[str] = None, prefix: Optional[str] = None,
               after: Optional[int] = None) -> "EventStream":
        """The workspace's events as they are committed (an agent key sees
        its own agent's only), from now on, or after event id ``after``."""
        return EventStream(self, actor, prefix, after)

    def lease(self, resource: str, actor: str, mode: Optional[str] = None, timeout: Optional[float] = None,
              *, renew_every: float = RENEW_EVERY_S,
              on_lost: Optional[Callable[["HeldLease"], None]] = None) -> "HeldLease":
        """A context manager that holds a lease around a block::

            with plane.lease("lock:deploy", "did:web:me", timeout=60) as lease:
                deploy(fence=lease.fence)

        It waits for the lease (``timeout`` seconds, None for no limit:
        ``LeaseHeld`` when it runs out), renews it every ``renew_every``
        seconds in the background, watches the events stream so that
        ``lease.lost`` turns True within a second of a loss (revoked by an
        operator's suspend, expired, or the plane unreachable until its
        lifetime ran out; ``on_lost`` is called then, from another thread),
        and at exit releases its own lease by id and raises ``LeaseLost``
        if it was lost (unless the block raised)."""
        return HeldLease(self, resource, actor, mode, timeout, renew_every, on_lost)


class EventStream:
    """An open events stream: iterate it for ``Event`` values; ``close()``
    ends it from any thread. ``next_id`` is the id of the next new event
    once the stream is live. Iteration raises ``PlaneUnreachable`` when the
    connection fails and a ``LeaseplaneError`` when the plane refuses or
    ends the stream."""

    def __init__(self, plane: Plane, actor: Optional[str], prefix: Optional[str], after: Optional[int]) -> None:
        self.plane = plane
        self.next_id: Optional[int] = None
        self._q = {k: v for k, v in (("actorDid", actor), ("prefix", prefix)) if v is not None}
        self._after = after
        self._conn: Optional[http.client.HTTPConnection] = None
        self._closed = False
        self._lock = threading.Lock()
        self.ready = threading.Event()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Event]:
        p = self.plane
        path = "/api/v1/acp/coordination/events"
        if self._q:
            path += "?" + urllib.parse.urlencode(self._q)
        # The plane sends a ping every 15 s: a read waiting longer than 40 s
        # is a dead connection.
        conn = p._connect(40.0)
        with self._lock:
            if self._closed:
                return
            self._conn = conn
        headers = p._headers()
        headers["Accept"] = "text/event-stream"
        if self._after is not None:
            headers["Last-Event-ID"] = str(self._after)
        try:
            try:
                conn.request("GET", p._base + path, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise PlaneUnreachable("could not reach the plane at %s: %s" % (p.url, e)) from e
            if resp.status != 200:
                raw = resp.read()
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = {"error": raw[:200].decode(errors="replace")}
                raise error_of(resp.status, answer, None)
            ev_id: Optional[str] = None
            ev_type = ""
            data: Optional[bytes] = None
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException, ValueError) as e:
                    if self._closed:
                        return
                    raise PlaneUnreachable("the events stream of %s was cut: %s" % (p.url, e)) from e
                if not line:
                    if self._closed:
                        return
                    raise PlaneUnreachable("the events stream of %s ended" % p.url)
                line = line.rstrip(b"\r\n")
                if line:
                    if line.startswith(b":"):
                        continue
                    name, _, value = line.partition(b":")
                    if value.startswith(b" "):
                        value = value[1:]
                    if name == b"id":
                        ev_id = value.decode()
                    elif name == b"event":
                        ev_type = value.decode()
                    elif name == b"data":
                        data = value if data is None else data + b"\n" + value
                    continue
                if data is not None:
                    fields = json.loads(data)
                    if ev_type == "ready":
                        self.next_id = int(fields.get("next", 0))
                        self.ready.set()
                    elif ev_type == "end":
                        raise error_of(0, fields, None)
                    elif ev_id is not None:
                        self._after = int(ev_id)
                        yield Event(id=int(ev_id), type=ev_type, data=data, fields=fields)
                ev_id, ev_type, data = None, "", None
        finally:
            with self._lock:
                self._conn = None
            conn.close()


class _Granted(Generic[T]):
    """A read-only attribute of a HeldLease: the same field of its newest grant."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, held: "HeldLease", owner: Optional[type] = None) -> T:
        return cast(T, getattr(held._current(), self.name))

    def __set__(self, held: "HeldLease", value: Any) -> None:
        raise AttributeError("leaseplane: %s of a held lease is the plane's, read-only" % self.name)


class HeldLease:
    """The lease a ``with plane.lease(...)`` block holds. Its attributes are
    the newest grant's (``id``, ``fence``, ...); ``lost`` turns True when
    the lease is lost, with ``lost_reason`` saying why."""

    def __init__(self, plane: Plane, resource: str, actor: str, mode: Optional[str], timeout: Optional[float],
                 renew_every: float, on_lost: Optional[Callable[["HeldLease"], None]]) -> None:
        self.plane, self.resource, self.actor, self._mode = plane, resource, actor, mode
        self._timeout = timeout
        self._renew_every = renew_every
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lost_event = threading.Event()
        self.lost_reason: Optional[str] = None
        self.lease: Optional[Lease] = None
        self._ended: Dict[str, str] = {}
        self._stream: Optional[EventStream] = None
        self._threads: list = []

    # The newest grant's fields.
    id = _Granted[str]()
    fence = _Granted[int]()
    mode = _Granted[str]()
    holder = _Granted[str]()
    granted_at_ms = _Granted[int]()
    expires_at_ms = _Granted[int]()

    @property
    def lost(self) -> bool:
        return self.lost_event.is_set()

    def _current(self) -> Lease:
        with self._lock:
            if self.lease is None:
                raise RuntimeError("leaseplane: the lease is not granted yet")
            return self.lease

    def _lose(self, why: str) -> None:
        with self._lock:
            if self.lost_event.is_set():
                return
            self.lost_reason = why
            self.lost_event.set()
        self._stop.set()
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                pass

    def _seen(self, ev: Event) -> None:
        if ev.resource != self.resource or not ev.ends_lease or not ev.lease_id:
            return
        if ev.type == "coordination.revoke":
            why = "the plane revoked it (an operator suspended %s)" % ev.actor
        elif ev.type == "coordination.expire":
            why = "it expired: no renewal reached the plane in time"
        else:
            why = "it was released by another client of %s" % ev.actor
        with self._lock:
            mine = self.lease is not None and self.lease.id == ev.lease_id
            if not mine and len(self._ended) < 64:
                self._ended[ev.lease_id] = why
        if mine:
            self._lose(why)

    def _watch(self, ready: threading.Event) -> None:
        after: Optional[int] = None
        while not self._stop.is_set():
            s = self.plane.events(self.actor, self.resource, after)
            s.ready = ready  # __enter__ waits for the first stream to be live
            with self._lock:
                self._stream = s
            if self._stop.is_set():
                return
            try:
                for ev in s:
                    after = ev.id
                    self._seen(ev)
            except PlaneUnreachable:
                pass
            except LeaseplaneError as e:
                if e.status == 410:
                    after = None
                elif e.status not in (0, 503):
                    ready.set()
                    return  # no stream here: renewals alone tell
            finally:
                if s.next_id is not None and after is None and s.next_id > 0:
                    after = s.next_id - 1  # resume from where this stream began
            ready.set()
            if self._stop.wait(0.5):
                return

    def _renew(self) -> None:
        lease = self._current()
        expires = time.monotonic() + LEASE_TTL_S
        wait = self._renew_every
        while not self._stop.wait(wait):
            sent = time.monotonic()
            try:
                got = self.plane.acquire(self.resource, self.actor, self._mode)
            except (PlaneUnreachable, Unavailable) as e:
                left = expires - time.monotonic()
                if left <= 0:
                    self._lose("could not reach the plane before the lease lapsed: %s" % e)
                    return
                wait = min(1.0, left)
                continue
            except LeaseplaneError as e:
                self._lose("renewal refused: %s" % e)
                return
            with self._lock:
                self.lease = got
            if got.id != lease.id or got.fence != lease.fence:
                self._lose("it lapsed and was granted again under fence %d (was %d)" % (got.fence, lease.fence))
                return
            expires = sent + LEASE_TTL_S
            wait = self._renew_every

    def __enter__(self) -> "HeldLease":
        ready = threading.Event()
        w = threading.Thread(target=self._watch, args=(ready,), name="leaseplane-watch", daemon=True)
        w.start()
        self._threads.append(w)
        ready.wait(10)
        try:
            got = self.plane.acquire(self.resource, self.actor, self._mode,
                                     wait=math.inf if self._timeout is None else self._timeout)
        except BaseException:
            self._shutdown()
            try:
                self.plane.release(self.resource, self.actor)  # stop waiting
            except LeaseplaneError:
                pass
            raise
        with self._lock:
            self.lease = got
            why = self._ended.get(got.id)
        if why is not None:
            self._lose(why)
        r = threading.Thread(target=self._renew, name="leaseplane-renew", daemon=True)
        r.start()
        self._threads.append(r)
        return self

    def _shutdown(self) -> None:
        self._stop.set()
        with self._lock:
            s = self._stream
        if s is not None:
            s.close()
        for t in self._threads:
            t.join(5)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._shutdown()
        with self._lock:
            lease = self.lease
        if lease is not None:
            try:
                self.plane.release(self.resource, self.actor, lease.id)
            except LeaseplaneError:
                pass  # lost already, or the plane is away: it lapses by itself
        if self.lost and exc_type is None:
            raise LeaseLost("lost the lease on %s: %s" % (self.resource, self.lost_reason))
