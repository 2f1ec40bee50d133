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
