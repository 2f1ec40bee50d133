#!/bin/sh
# measure.sh LEASEPLANE LOAD [ledgerload flags...]: starts LEASEPLANE serve on
# a new data folder, runs ledgerload's LOAD (spread or renew) against it,
# waits for the ledger, stops the server (SIGTERM: ledger.db is checkpointed)
# and prints the ledger's entries, ledger.db's size and the bytes an entry.
set -e
BIN=$1; LOAD=$2; shift 2
D=$(mktemp -d); PORT=${PORT:-18790}
"$BIN" serve --addr 127.0.0.1:$PORT --data "$D/data" > "$D/serve.log" 2>&1 &
PID=$!
for i in $(seq 50); do grep -q LEASEPLANE_URL "$D/serve.log" 2>/dev/null && break; sleep 0.2; done
export LEASEPLANE_KEY=$(sed -n 's/^export LEASEPLANE_KEY=//p' "$D/serve.log")
export LEASEPLANE_URL=http://127.0.0.1:$PORT
${LEDGERLOAD:-ledgerload} --load "$LOAD" "$@"
sleep 3
SIZE=$(curl -s -H "Authorization: Bearer $LEASEPLANE_KEY" $LEASEPLANE_URL/api/v1/ledger/checkpoint | sed -n 2p)
kill -TERM $PID; wait $PID || true
BYTES=$(cat "$D/data/ledger.db" "$D/data/ledger.db-wal" 2>/dev/null | wc -c)
echo "$LOAD: $SIZE entries, ledger.db $BYTES bytes, $(echo "scale=1; $BYTES / $SIZE" | bc) bytes an entry (log: $(wc -c < "$D/data/leaseplane.db") bytes)"
if [ -n "$KEEP" ]; then echo "data folder: $D/data"; else rm -rf "$D"; fi
