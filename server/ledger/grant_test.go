package ledger

import "testing"

// TestGrantID: the lease id of a grant, read from its first bytes where the
// entry is canonical, and by parsing it otherwise; "" for other entries.
func TestGrantID(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{`{"type":"coordination.lease","atMs":1,"resource":"lock:a","class":"exclusive","actorDid":"did:x:a","leaseId":"lease_33b2fe543d3785fd","fence":1}`, "lease_33b2fe543d3785fd"},
		{`{"type":"coordination.release","atMs":1,"resource":"lock:a","leaseId":"lease_33b2fe543d3785fd"}`, ""},
		{`{"type":"coordination.lease","atMs":1,"resource":"x\",\"leaseId\":\"lease_0000000000000000","leaseId":"lease_1111111111111111"}`, "lease_1111111111111111"},
		{`{"type":"coordination.leased","leaseId":"lease_1111111111111111"}`, ""},
		{`{"atMs":1,"type":"coordination.lease","leaseId":"lease_2222222222222222"}`, "lease_2222222222222222"},
		{`{"type":"drill.result","leaseId":"lease_3333333333333333"}`, ""},
		{`{"type":"coordination.lease","leaseId":"lease_\u0031"}`, "lease_1"},
	} {
		if got := grantID([]byte(tc.entry)); got != tc.want {
			t.Errorf("grantID(%s) = %q, want %q", tc.entry, got, tc.want)
		}
	}
}

// TestRemember: the cache of stored hashes keeps a window of the newest,
// whatever the sizes of the appends, and starts again after a gap.
func TestRemember(t *testing.T) {
	var w wsLedger
	next := int64(0)
	for _, n := range []int{1, 3, cacheMax - 1, 2 * cacheMax, 5, 3*cacheMax + 7, cacheMax, 1, 0, 2} {
		hs := make([][32]byte, n)
		for i := range hs {
			hs[i][0], hs[i][1], hs[i][2] = byte(next+int64(i)), byte((next+int64(i))>>8), byte((next+int64(i))>>16)
		}
		w.remember(next, hs)
		next += int64(n)
		end := w.cacheStart + int64(len(w.cache))
		if end != next || len(w.cache) > 2*cacheMax || (next >= cacheMax && len(w.cache) < cacheMax) {
			t.Fatalf("after %d hashes: window [%d, %d) of %d, want it to end at %d", n, w.cacheStart, end, len(w.cache), next)
		}
		for i, h := range w.cache {
			x := w.cacheStart + int64(i)
			if h[0] != byte(x) || h[1] != byte(x>>8) || h[2] != byte(x>>16) {
				t.Fatalf("cache holds a wrong hash at %d", x)
			}
		}
	}
	w.remember(next+10, make([][32]byte, 3)) // a gap: start again
	if w.cacheStart != next+10 || len(w.cache) != 3 {
		t.Fatalf("after a gap: window from %d of %d", w.cacheStart, len(w.cache))
	}
}
