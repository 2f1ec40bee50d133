import os, time, requests

API = os.environ.get("LEASEPLANE_URL", "http://127.0.0.1:8080") + "/api/v1/acp/coordination"
headers = {"Authorization": "Bearer " + os.environ["LEASEPLANE_KEY"]}
ask = {"resource": "lock:deploy/production", "actorDid": "did:web:acme.example:agent:cost"}

lease = None
for attempt in range(40):
    got = requests.post(API + "/lease", headers=headers, json=ask, timeout=10).json()
    if got["ok"]:
        lease = got["lease"]
        break
    if got["reason"] != "lease_held":
        raise SystemExit(got["reason"] + ": " + got.get("error", ""))  # deadlock: release what you hold first
    time.sleep(got["stampede"]["waitMs"] / 1000)
if lease is None:
    raise SystemExit("gave up")
try:
    print("deploying with fence", lease["fence"])
    # ... deploy ...
finally:
    res = requests.post(API + "/release", headers=headers,
                        json={**ask, "leaseId": lease["id"]}, timeout=10)
    print("released:", res.json()["released"])
