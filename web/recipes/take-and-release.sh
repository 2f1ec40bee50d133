API=${LEASEPLANE_URL:-http://127.0.0.1:8080}/api/v1/acp/coordination
WHO='"resource": "lock:deploy/production", "actorDid": "did:web:acme.example:agent:release"'

got=$(curl -sS -X POST "$API/lease" \
  -H "Authorization: Bearer $LEASEPLANE_KEY" \
  -H "Content-Type: application/json" \
  -d "{$WHO}")
echo "$got"
[ "$(echo "$got" | jq -r .ok)" = true ] || exit 1
id=$(echo "$got" | jq -r .lease.id)

# ... deploy ...

curl -sS -X POST "$API/release" \
  -H "Authorization: Bearer $LEASEPLANE_KEY" \
  -H "Content-Type: application/json" \
  -d "{$WHO, \"leaseId\": \"$id\"}"
