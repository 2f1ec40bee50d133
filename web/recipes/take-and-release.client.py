import leaseplane

plane = leaseplane.Plane()  # reads LEASEPLANE_URL and LEASEPLANE_KEY
lease = plane.acquire("lock:deploy/production", "did:web:acme.example:agent:release")
try:
    print("holding", lease.id, "fence", lease.fence)
    # ... deploy, passing lease.fence downstream ...
finally:
    print("released:", plane.release(lease.resource, lease.holder, lease_id=lease.id))
