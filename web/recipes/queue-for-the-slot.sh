API=${LEASEPLANE_URL:-http://127.0.0.1:8080}/api/v1/acp/coordination
WHO='"resource": "lock:deploy/production", "actorDid": "did:web:acme.example:agent:cost"'

for attempt in $(seq 40); do
  got=$(curl -sS -X POST "$API/lease" \
    -H "Authorization: Bearer $LEASEPLANE_KEY" \
    -H "Content-Type: application/json" -d "{$WHO}")
  case $(echo "$got" | jq -r '.reason // "ok"') in
    ok) break ;;
    lease_held) sleep "$(echo "$got" | jq '.stampede.waitMs / 1000')" ;;
    *) echo "$got"; exit 1 ;;  # deadlock: release what you hold first
  esac
done
[ "$(echo "$got" | jq -r .ok)" = true ] || { echo "gave up"; exit 1; }
id=$(echo "$got" | jq -r .lease.id)
echo "deploying with fence $(echo "$got" | jq .lease.fence)"

# ... deploy ...

curl -sS -X POST "$API/release" \
  -H "Authorization: Bearer $LEASEPLANE_KEY" \
  -H "Content-Type: application/json" \
  -d "{$WHO, \"leaseId\": \"$id\"}"
