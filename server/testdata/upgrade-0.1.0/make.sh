set -e
. "$(dirname "$0")/../upgrade-workload.sh"
D=$1; SIG=$2; PORT=$3
OP=$(awk '{print $NF}' op.txt | tail -1); WS=$(awk '{print $NF}' ws.txt)
./leaseplane serve --addr 127.0.0.1:$PORT --data $D > serve.$SIG.log 2>&1 &
PID=$!
sleep 1.5
U=http://127.0.0.1:$PORT/api/v1/acp
post() { curl -s -H "Authorization: Bearer $1" -H 'content-type: application/json' -d "$3" $U/$2; echo; }
A=did:web:acme.example:agent:release; B=did:web:acme.example:agent:cost; C=did:web:acme.example:agent:export; R=did:web:acme.example:agent:rogue
post $WS coordination/lease "{\"resource\":\"lock:deploy/production\",\"actorDid\":\"$A\"}"
post $WS coordination/lease "{\"resource\":\"lock:deploy/production\",\"actorDid\":\"$B\"}"
shared_read_and_relet
post $WS coordination/lease "{\"resource\":\"lock:rogue\",\"actorDid\":\"$R\"}"
post $OP operator/suspend "{\"actorDid\":\"$R\"}"
curl -s -H "Authorization: Bearer $WS" $U/coordination/wait; echo
kill -$SIG $PID; wait $PID || true
