package server

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/internal/cputime"
)

// BenchmarkLedgerHandlerPair is BenchmarkHandlerPair with the signed
// ledger on and off: what the ledger costs an acquire+release pair (the
// hand-off to the ledger, and the ledger's writer and signer running beside
// the commits). Both keep each command's events in its log row; off, a
// server keeps its events in events.db instead, which on does not write.
// cpu-µs/pair is the process's CPU time (getrusage) over the timed run per
// pair: less swayed by other work on the machine than the wall time.
func BenchmarkLedgerHandlerPair(b *testing.B) {
	for _, noLedger := range []bool{false, true} {
		name := "ledger=on"
		if noLedger {
			name = "ledger=off"
		}
		b.Run(name, func(b *testing.B) {
			s, key := benchServer(b, Config{NoLedger: noLedger})
			b.SetParallelism(32)
			cpu0 := cputime.Process(b)
			runPairs(b, s.Handler(), key)
			b.ReportMetric(float64((cputime.Process(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/pair")
			reportCommits(b, s)
		})
	}
}

// BenchmarkLedgerReceiptOfNewGrant is a grant and then its receipt, as
// `leaseplane lease --receipt` asks for it: the route waits for the
// ledger's writer to append the grant and signs a checkpoint that covers
// it on demand.
func BenchmarkLedgerReceiptOfNewGrant(b *testing.B) {
	s, key := benchServer(b, Config{})
	h := s.Handler()
	var grant, receipt time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		req := httptest.NewRequest("POST", api.PathLease, strings.NewReader(fmt.Sprintf(`{"resource":"lock:r%d","actorDid":"did:example:a"}`, i)))
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("lease: %d %s", w.Code, w.Body)
		}
		t1 := time.Now()
		id := strings.Split(strings.Split(w.Body.String(), `"id":"`)[1], `"`)[0]
		req = httptest.NewRequest("GET", "/api/v1/ledger/receipt?leaseId="+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("receipt: %d %s", w.Code, w.Body)
		}
		grant += t1.Sub(t0)
		receipt += time.Since(t1)
	}
	b.ReportMetric(float64(grant.Microseconds())/float64(b.N), "grant-µs/op")
	b.ReportMetric(float64(receipt.Microseconds())/float64(b.N), "receipt-µs/op")
}
