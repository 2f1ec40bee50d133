#!/bin/sh
# attacks-before-after.sh [NAME...]: runs each availability attack test of
# docs/SECURITY.md against the tree of the commit before its fix and then
# against the fix commit, and prints one Markdown table row per test.
#
# Each tree is a `git archive` of the commit in a temporary folder, with the
# test files copied in from the commit named in the row (the one that added
# or last fixed the test); nothing in this worktree changes. A row's edit
# (a sed expression, or -) changes the copied test in both trees, its "old
# edit" in the older tree only, where the test took a flag that did not
# exist yet (docs/SECURITY.md says which and why). Not part of `make test`: it builds
# the binary twice per row and takes about an hour on a loaded machine.
# Run it from the repository's root; TIMEOUT bounds each go test (5m);
# each go test's output is kept in LOGS (/tmp) as attacks-ba-COMMIT-TEST.log.
set -u

timeout=${TIMEOUT:-5m}
work=$(mktemp -d /tmp/attacks-ba.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# name|fix commit|commit the test files come from|package|test|files|edit|old edit
rows='stalled|b3cb779|b3cb779|./cmd/leaseplane|TestStalledBodies|cmd/leaseplane/avail_test.go|-|-
keyless|b3cb779|b3cb779|./cmd/leaseplane|TestConnectionsWithoutKey|cmd/leaseplane/avail_test.go|s/"--workspace", "tenant")/"--workspace", "tenant", "--new-workspace")/|-
heldflood|b3cb779|b3cb779|./cmd/leaseplane|TestHeldRequestFlood|cmd/leaseplane/avail_test.go|s/"--workspace", "tenant")/"--workspace", "tenant", "--new-workspace")/|-
revoked|b3cb779|b3cb779|./cmd/leaseplane|TestHeldAcrossRevocation|cmd/leaseplane/avail_test.go|-|-
shutdown|b3cb779|b3cb779|./cmd/leaseplane|TestShutdownWithHeldAndStalled|cmd/leaseplane/avail_test.go|-|s/startChildArgs(t, data, "--drain-timeout", "10m")/startChildArgs(t, data)/
exportmark|0031ae2|e9acefe|./cmd/leaseplane|TestExportMarkNeedsOperator|cmd/leaseplane/avail_test.go|-|-
mcpstdio|e9acefe|e9acefe|./cmd/leaseplane|TestMCPStdioMalformedLines|cmd/leaseplane/avail_test.go|-|-
drillsfair|fbf4895|fbf4895|./cmd/leaseplane|TestDrillsFairAcrossWorkspaces|cmd/leaseplane/avail_test.go cmd/leaseplane/drillqueue_test.go|-|-
drillcancel|fbf4895|fbf4895|./cmd/leaseplane|TestDrillCancel|cmd/leaseplane/avail_test.go cmd/leaseplane/drillqueue_test.go|-|-
query|fd65994|HEAD|./cmd/leaseplane|TestStrictQueryParameters|cmd/leaseplane/query_test.go|-|-
fairshare|49c6c1c|49c6c1c|./server|TestConnGuardFairShare|server/guard_test.go|-|-
slowbodies|ece27cc|ece27cc|./server|TestSlowBodies|server/slowbody_test.go|-|-'

# run TREE SRC PKG TEST FILES EDIT OLDEDIT: the result of TEST at TREE,
# one line: ok, or FAIL and the last line the test printed.
run() {
	tree=$1 src=$2 pkg=$3 test=$4 files=$5 edit=$6 oldedit=$7
	dir=$work/$(git rev-parse --short "$tree")-$test
	mkdir -p "$dir" "$dir.tmp"
	git archive "$tree" | tar -x -C "$dir"
	for f in $files; do
		git show "$src:$f" >"$dir/$f"
		for e in "$edit" "$oldedit"; do
			if [ "$e" != - ]; then sed -i "$e" "$dir/$f"; fi
		done
	done
	log=$dir.log
	(cd "$dir" && TMPDIR=$dir.tmp nice -n 10 go test -count=1 -timeout "$timeout" -run "^$test\$" -v "$pkg") >"$log" 2>&1
	if grep -q "^--- PASS: $test " "$log"; then
		echo ok
	elif grep -q '^panic: test timed out' "$log"; then
		echo "FAIL: no end within $timeout; last said: $(grep -E '_test\.go:[0-9]+:' "$log" | tail -1 | sed 's/^ *//' | cut -c1-160)"
	elif grep -q "^--- FAIL: $test" "$log"; then
		echo "FAIL: $(grep -E '^ +[a-z_]+_test\.go:[0-9]+:' "$log" | tail -1 | sed 's/^ *//' | cut -c1-200)"
	else
		echo "did not run: $(grep -v '^#' "$log" | grep -m1 -E 'error|undefined|cannot|FAIL' | cut -c1-200)"
	fi
	# A test that timed out leaves its server running: end the processes
	# this run's binaries started (their paths are in its folders).
	for p in $(pgrep -f "$dir[./]"); do kill "$p" 2>/dev/null; done
	chmod -R u+w "$dir" "$dir.tmp" 2>/dev/null
	cp "$log" "${LOGS:-/tmp}/attacks-ba-$(git rev-parse --short "$tree")-$test.log" 2>/dev/null
	rm -rf "$dir" "$dir.tmp" "$log"
}

echo "| test | fix commit | before (the fix's parent) | at the fix |"
echo "| --- | --- | --- | --- |"
echo "$rows" | while IFS='|' read -r name fix src pkg test files edit oldedit; do
	if [ $# -gt 0 ]; then
		case " $* " in *" $name "*) ;; *) continue ;; esac
	fi
	[ "$src" = HEAD ] && src=$(git rev-parse --short HEAD)
	before=$(run "$fix^" "$src" "$pkg" "$test" "$files" "$edit" "$oldedit")
	after=$(run "$fix" "$src" "$pkg" "$test" "$files" "$edit" -)
	echo "| \`$test\` | $fix | $before | $after |"
done
