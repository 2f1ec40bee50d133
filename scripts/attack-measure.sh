#!/bin/sh
# attack-measure.sh LEASEPLANE MEASURE [ATTACK FLAGS...]: starts the
# leaseplane binary LEASEPLANE (serve, its default limits) on a new data
# folder and a free port, runs `MEASURE attack` (cmd/leaseplane-measure)
# against it with the first start's key and the flags given (default:
# -sockets 2560 -addrs 10 -pace 1s -duration 10s), prints the server's
# load average before and after, and stops the server. The figures of
# docs/SECURITY.md, "Availability", come from it. Not part of make test.
set -eu
bin=$1 measure=$2
shift 2
[ $# -gt 0 ] || set -- -sockets 2560 -addrs 10 -pace 1s -duration 10s
dir=$(mktemp -d /tmp/attack-measure.XXXXXX)
ulimit -n 20000
"$bin" serve --addr 127.0.0.1:0 --data "$dir/data" --log-level error >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
i=0
until grep -q '^export LEASEPLANE_URL=' "$dir/out" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 600 ] || { echo "serve printed no URL" >&2; cat "$dir/err" >&2; exit 1; }
	sleep 0.1
done
url=$(sed -n 's/^export LEASEPLANE_URL=//p' "$dir/out")
key=$(sed -n 's/^export LEASEPLANE_KEY=//p' "$dir/out")
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$measure" attack -url "$url" -key "$key" -pid $pid "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
