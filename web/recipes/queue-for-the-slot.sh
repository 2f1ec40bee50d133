API=${LEASEPLANE_URL:-http://127.0.0.1:8080}/api/v1/acp/coordination
ASK='{"resource": "lock:deploy/production", "actorDid": "did:web:acme.example:agent:cost"}'

for attempt in $(seq 40); do
  got=$(curl -sS -X POST "$API/lease" \
    -H "Authorization: Bearer $LEASEPLANE_KEY" \
    -H "Content-Type: application/json" -d "$ASK")
  case $(echo "$got" | jq -r '.reason // "ok"') in
    ok) echo "deploying with fence $(echo "$got" | jq .lease.fence)"; exit 0 ;;
    lease_held) sleep "$(echo "$got" | jq '.stampede.waitMs / 1000')" ;;
    *) echo "$got"; exit 1 ;;  # deadlock: release what you hold first
  esac
done
echo "gave up"; exit 1
