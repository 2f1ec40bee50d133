import sys
import leaseplane

plane = leaseplane.Plane()  # reads LEASEPLANE_URL and LEASEPLANE_KEY
try:
    # Waits in the queue without polling (held requests), renews the lease
    # every 10 s while the block runs, and releases it by its id at the end.
    with plane.lease("lock:deploy/production", "did:web:acme.example:agent:cost", timeout=300) as lease:
        print("deploying with fence", lease.fence)
        # ... deploy, passing lease.fence downstream; stop if lease.lost ...
except leaseplane.LeaseHeld as e:
    sys.exit("gave up after 300 s: still held by %s" % e.holder)
except leaseplane.Deadlock as e:
    sys.exit("deadlock: release what you hold first (%s waits on %s)" % (e.holder, e.waiting_on))
