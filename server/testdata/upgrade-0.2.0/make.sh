# make.sh DIR SIG PORT: runs the workload below against `./leaseplane serve`
# on the data folder DIR (made before by `keys create`, see README.md), then
# stops it with signal SIG (TERM: a clean stop; KILL: a crash).
set -e
. "$(dirname "$0")/../upgrade-workload.sh"
D=$1; SIG=$2; PORT=$3
WS=$(cat ws.key); OP=$(cat op.key); AG=$(cat agent.key)
./leaseplane serve --addr 127.0.0.1:$PORT --data $D > serve.$SIG.log 2>&1 &
PID=$!
until curl -sf http://127.0.0.1:$PORT/healthz > /dev/null; do sleep 0.2; done
U=http://127.0.0.1:$PORT/api/v1/acp
post() { curl -s -H "Authorization: Bearer $1" -H 'content-type: application/json' -d "$3" "$U/$2"; echo; }
A=did:web:acme.example:agent:release; B=did:web:acme.example:agent:cost; C=did:web:acme.example:agent:export
R=did:web:acme.example:agent:rogue; H=did:web:acme.example:agent:held; W=did:web:acme.example:agent:late
post $WS coordination/lease "{\"resource\":\"lock:deploy/production\",\"actorDid\":\"$A\"}"
post $AG coordination/lease "{\"resource\":\"lock:deploy/production\",\"actorDid\":\"$B\"}"
shared_read_and_relet
# A held request granted: H waits on lock:held until C releases it.
post $WS coordination/lease "{\"resource\":\"lock:held\",\"actorDid\":\"$C\"}"
post $WS 'coordination/lease?waitUpToMs=20000' "{\"resource\":\"lock:held\",\"actorDid\":\"$H\"}" > held.out &
HELD=$!
until curl -s -H "Authorization: Bearer $WS" "$U/coordination/wait?prefix=lock:held" | grep -q "$H"; do sleep 0.1; done
post $WS coordination/release "{\"resource\":\"lock:held\",\"actorDid\":\"$C\"}"
wait $HELD; cat held.out; rm held.out
# A held request still open when the server stops: W waits on lock:a.
post $WS 'coordination/lease?waitUpToMs=20000' "{\"resource\":\"lock:a\",\"actorDid\":\"$W\"}" > late.out &
LATE=$!
until curl -s -H "Authorization: Bearer $WS" "$U/coordination/wait?prefix=lock:a" | grep -q "$W"; do sleep 0.1; done
post $WS coordination/lease "{\"resource\":\"lock:rogue\",\"actorDid\":\"$R\"}"
post $OP operator/suspend "{\"actorDid\":\"$R\"}"
curl -s -H "Authorization: Bearer $WS" $U/coordination/wait; echo
# The ledger caught up: every event is an entry.
until curl -s -H "Authorization: Bearer $WS" http://127.0.0.1:$PORT/api/v1/ledger/checkpoint | sed -n 2p | grep -qx 13; do sleep 0.2; done
curl -s -H "Authorization: Bearer $WS" http://127.0.0.1:$PORT/api/v1/ledger/checkpoint
kill -$SIG $PID; wait $PID || true
wait $LATE || true; cat late.out; echo; rm late.out
