import os, requests

API = os.environ.get("LEASEPLANE_URL", "http://127.0.0.1:8080") + "/api/v1/acp/coordination"
headers = {"Authorization": "Bearer " + os.environ["LEASEPLANE_KEY"]}
who = {"resource": "lock:deploy/production", "actorDid": "did:web:acme.example:agent:release"}

got = requests.post(API + "/lease", headers=headers, json=who, timeout=10).json()
if not got["ok"]:
    raise SystemExit("refused: " + got["reason"])
try:
    print("holding", got["lease"]["id"], "fence", got["lease"]["fence"])
    # ... deploy ...
finally:
    res = requests.post(API + "/release", headers=headers,
                        json={**who, "leaseId": got["lease"]["id"]}, timeout=10)
    print("released:", res.json()["released"])
