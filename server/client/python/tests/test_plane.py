"""The Python client against a real `leaseplane serve`."""

from __future__ import annotations

import asyncio
import itertools
import threading
import unittest

import leaseplane
from leaseplane._errors import error_of
from planeserver import shared, stop_shared

_names = itertools.count()


def setUpModule() -> None:
    shared()


def tearDownModule() -> None:
    stop_shared()


def fresh(prefix: str) -> str:
    """A resource name no other test uses."""
    return "lock:%s/%d" % (prefix, next(_names))


class ErrorOfTest(unittest.TestCase):
    """Each reason the plane answers is its own class, with its fields."""

    def test_class_by_reason(self) -> None:
        for reason, cls in (("lease_held", leaseplane.LeaseHeld), ("deadlock", leaseplane.Deadlock),
                            ("suspended", leaseplane.Suspended), ("limit_exceeded", leaseplane.LimitExceeded),
                            ("cancelled", leaseplane.Cancelled), ("stale_lease", leaseplane.StaleLease),
                            ("unauthorized", leaseplane.Unauthorized), ("actor_mismatch", leaseplane.ActorMismatch),
                            ("forbidden", leaseplane.Forbidden), ("invalid_request", leaseplane.InvalidRequest),
                            ("unavailable", leaseplane.Unavailable), ("not_found", leaseplane.NotFound),
                            ("agent_busy", leaseplane.AgentBusy), ("gone", leaseplane.Gone)):
            e = error_of(409, {"ok": False, "reason": reason, "error": "why"}, 2.0)
            self.assertIs(type(e), cls, reason)
            self.assertEqual((e.reason, cls.reason, e.status, e.retry_after, e.message), (reason, reason, 409, 2.0, reason + ": why"))
        e = error_of(500, {"reason": "internal"}, None)
        self.assertIs(type(e), leaseplane.LeaseplaneError)
        self.assertEqual(e.reason, "internal")
        self.assertEqual((leaseplane.PlaneUnreachable.reason, leaseplane.LeaseLost.reason), ("unreachable", "lost"))
        self.assertIsInstance(leaseplane.PlaneUnreachable("x"), ConnectionError)

    def test_fields(self) -> None:
        held = error_of(409, {"reason": "lease_held", "holder": "did:web:a", "holders": ["did:web:a"],
                                         "stampede": {"waitMs": 50, "admitted": ["did:web:b"]}}, 1.0)
        self.assertEqual((held.holder, held.holders, held.claimants, held.wait_ms, held.admitted),
                         ("did:web:a", ["did:web:a"], [], 50, ["did:web:b"]))
        claims = error_of(409, {"reason": "lease_held", "claimants": ["did:web:b"]}, None)
        self.assertEqual((claims.holder, claims.claimants, claims.wait_ms), (None, ["did:web:b"], 0))
        dl = error_of(409, {"reason": "deadlock", "holder": "did:web:b", "waitingOn": "r", "cycle": ["x"]}, None)
        self.assertEqual((dl.holder, dl.waiting_on, dl.cycle), ("did:web:b", "r", ["x"]))
        lim = error_of(429, {"reason": "limit_exceeded", "limit": "asks", "max": 8}, 1.0)
        self.assertEqual((lim.limit, lim.max), ("asks", 8))


class PlaneTest(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = shared()
        self.plane = leaseplane.Plane(self.srv.url, self.srv.key)

    def queue(self, resource: str) -> dict:
        for q in self.plane.wait(prefix=resource)["queues"]:
            if q["resource"] == resource:
                return q
        return {"holders": [], "waiters": []}

    def test_package_is_typed(self) -> None:
        import importlib.resources
        self.assertTrue(importlib.resources.files("leaseplane").joinpath("py.typed").is_file())

    def test_take_and_release(self) -> None:
        r = fresh("take")
        lease = self.plane.acquire(r, "did:web:a")
        self.assertIsInstance(lease, leaseplane.Lease)
        self.assertEqual((lease.resource, lease.holder, lease.mode), (r, "did:web:a", "write"))
        self.assertGreater(lease.fence, 0)
        self.assertEqual(lease.expires_at_ms - lease.granted_at_ms, 30000)
        # A renewal keeps id and fence; mode=None keeps the mode.
        again = self.plane.acquire(r, "did:web:a")
        self.assertEqual((again.id, again.fence, again.mode), (lease.id, lease.fence, "write"))
        with self.assertRaises(leaseplane.LeaseHeld) as cm:
            self.plane.acquire(r, "did:web:b")
        e = cm.exception
        self.assertEqual((e.status, e.reason, e.holder, e.holders), (409, "lease_held", "did:web:a", ["did:web:a"]))
        self.assertEqual(e.admitted, ["did:web:b"])
        self.assertGreater(e.wait_ms, 0)
        self.assertEqual(e.answer["reason"], "lease_held")
        with self.assertRaises(leaseplane.StaleLease):
            self.plane.release(r, "did:web:a", lease_id="0" * 32)
        self.assertTrue(self.plane.release(r, "did:web:a", lease_id=lease.id))
        self.assertFalse(self.plane.release(r, "did:web:a"))
        self.plane.release(r, "did:web:b")
        self.assertEqual(self.queue(r), {"holders": [], "waiters": []})

    def test_errors_by_reason(self) -> None:
        r = fresh("errors")
        with self.assertRaises(leaseplane.Unauthorized) as cm:
            leaseplane.Plane(self.srv.url, "lp_nope_nope").acquire(r, "did:web:a")
        self.assertEqual(cm.exception.status, 401)
        agent = leaseplane.Plane(self.srv.url, self.srv.new_key("--agent", "did:web:own"))
        with self.assertRaises(leaseplane.ActorMismatch):
            agent.acquire(r, "did:web:other")
        with self.assertRaises(leaseplane.InvalidRequest) as ci:
            self.plane.acquire(r, "not-a-did")
        self.assertIn("actorDid", ci.exception.message)
        with self.assertRaises(leaseplane.PlaneUnreachable):
            leaseplane.Plane("http://127.0.0.1:1", "k").acquire(r, "did:web:a")
        self.srv.suspend("did:web:sus")
        try:
            with self.assertRaises(leaseplane.Suspended):
                self.plane.acquire(r, "did:web:sus")
        finally:
            self.srv.suspend("did:web:sus", resume=True)
        for cls in (leaseplane.LeaseHeld, leaseplane.Deadlock, leaseplane.Suspended, leaseplane.LimitExceeded,
                    leaseplane.Cancelled, leaseplane.StaleLease, leaseplane.Unauthorized, leaseplane.ActorMismatch,
                    leaseplane.Unavailable, leaseplane.LeaseLost, leaseplane.PlaneUnreachable):
            self.assertTrue(issubclass(cls, leaseplane.LeaseplaneError), cls)

    def test_deadlock(self) -> None:
        r1, r2 = fresh("dl"), fresh("dl")
        self.plane.acquire(r1, "did:web:a")
        self.plane.acquire(r2, "did:web:b")
        with self.assertRaises(leaseplane.LeaseHeld):
            self.plane.acquire(r1, "did:web:b")  # b now waits on r1
        with self.assertRaises(leaseplane.Deadlock) as cm:
            self.plane.acquire(r2, "did:web:a")
        e = cm.exception
        self.assertEqual((e.holder, e.waiting_on), ("did:web:b", r1))
        self.assertIn("did:web:a", e.cycle)
        for r, a in ((r1, "did:web:a"), (r2, "did:web:b"), (r1, "did:web:b")):
            self.plane.release(r, a)

    def test_wait_is_held_not_polled(self) -> None:
        r = fresh("held")
        first = self.plane.acquire(r, "did:web:a")
        got: list = []
        sent: list = []
        b = leaseplane.Plane(self.srv.url, self.srv.key)
        send = b._request
        b._request = lambda *a, **k: (sent.append(a[1]), send(*a, **k))[1]  # type: ignore[method-assign]
        t = threading.Thread(target=lambda: got.append(b.acquire(r, "did:web:b", wait=25)))
        t.start()
        while not self.queue(r)["waiters"]:
            pass  # until b's held request is in the queue
        self.plane.release(r, "did:web:a")
        t.join(30)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].holder, "did:web:b")
        self.assertGreater(got[0].fence, first.fence)
        self.assertEqual(len(sent), 1, "one held request, no polling: %s" % sent)
        self.assertTrue(sent[0].startswith("/api/v1/acp/coordination/lease?waitUpToMs=2"), sent)
        self.plane.release(r, "did:web:b")

    def test_wait_runs_out(self) -> None:
        r = fresh("runsout")
        self.plane.acquire(r, "did:web:a")
        with self.assertRaises(leaseplane.LeaseHeld):
            self.plane.acquire(r, "did:web:b", wait=0.2)
        self.plane.release(r, "did:web:a")
        self.plane.release(r, "did:web:b")

    def test_with_lease_releases(self) -> None:
        r = fresh("with")
        with self.plane.lease(r, "did:web:a", timeout=10) as lease:
            self.assertFalse(lease.lost)
            q = self.queue(r)
            self.assertEqual([h["id"] for h in q["holders"]], [lease.id])
            fence = lease.fence
        self.assertEqual(self.queue(r), {"holders": [], "waiters": []})
        with self.plane.lease(r, "did:web:b") as lease:
            self.assertGreater(lease.fence, fence)
        # A block that raises still releases, and its error goes through.
        with self.assertRaises(ZeroDivisionError):
            with self.plane.lease(r, "did:web:a"):
                1 / 0
        self.assertEqual(self.queue(r), {"holders": [], "waiters": []})

    def test_with_lease_times_out(self) -> None:
        r = fresh("timeout")
        self.plane.acquire(r, "did:web:a")
        with self.assertRaises(leaseplane.LeaseHeld):
            with self.plane.lease(r, "did:web:b", timeout=0.2):
                self.fail("granted while a holds it")
        self.assertEqual(self.queue(r)["waiters"], [], "a timed-out lease() leaves no wait behind")
        self.plane.release(r, "did:web:a")

    def test_loss_by_suspend_is_pushed(self) -> None:
        """An operator's suspend is noticed from the events stream: no
        renewal (no acquire request at all) between the suspend and the
        notice."""
        r = fresh("suspend")
        lost = []
        with self.assertRaises(leaseplane.LeaseLost) as cm:
            with self.plane.lease(r, "did:web:pushed", renew_every=3600, on_lost=lambda l: lost.append(1)) as lease:
                before = self.srv.acquire_requests()
                self.srv.suspend("did:web:pushed")
                self.assertTrue(lease.lost_event.wait(20), "the loss never came")
                self.assertEqual(self.srv.acquire_requests(), before, "an acquire request was sent before the notice")
                self.assertTrue(lease.lost)
                self.assertIn("revoked", lease.lost_reason or "")
        self.assertIn("lost the lease on " + r, str(cm.exception))
        self.assertEqual(lost, [1])
        self.srv.suspend("did:web:pushed", resume=True)
        self.assertEqual(self.queue(r), {"holders": [], "waiters": []})

    def test_events_stream(self) -> None:
        r = fresh("events")
        with self.plane.events(prefix=r) as stream:
            it = iter(stream)
            got: list = []
            t = threading.Thread(target=lambda: got.extend(itertools.islice(it, 2)))
            t.start()
            stream.ready.wait(10)
            lease = self.plane.acquire(r, "did:web:a")
            self.plane.release(r, "did:web:a")
            t.join(20)
        self.assertEqual([e.type for e in got], ["coordination.lease", "coordination.release"])
        self.assertEqual(got[0].lease_id, lease.id)
        self.assertEqual(got[1].id, got[0].id + 1)
        self.assertTrue(got[1].ends_lease)


class AsyncPlaneTest(unittest.TestCase):
    def test_async(self) -> None:
        srv = shared()
        plane = leaseplane.AsyncPlane(srv.url, srv.key)
        r = fresh("async")

        async def main() -> None:
            lease = await plane.acquire(r, "did:web:a")
            with self.assertRaises(leaseplane.LeaseHeld):
                await plane.acquire(r, "did:web:b")
            self.assertTrue(await plane.release(r, "did:web:a", lease.id))
            await plane.release(r, "did:web:b")
            async with plane.lease(r, "did:web:b", timeout=10) as held:
                self.assertFalse(held.lost)
                self.assertGreater(held.fence, lease.fence)
            q = await plane.wait(prefix=r)
            self.assertEqual(q["queues"], [])

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
