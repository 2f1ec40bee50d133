package ledger_test

import (
	"testing"

	"github.com/leaseplane/leaseplane/kernel/ledger"
)

// BenchmarkSignCheckpoint is a checkpoint of a 100,000-entry tree in
// memory: its root from the stored hashes and the Ed25519 signature.
func BenchmarkSignCheckpoint(b *testing.B) {
	s, _ := testKey(b, origin, 7)
	tr := tree(b, 100000)
	b.ResetTimer()
	for range b.N {
		sign(b, tr, s, tr.Size())
	}
}

// BenchmarkVerifyReceipt is `leaseplane verify` of one receipt in a
// 100,000-entry tree, file reading aside: parsing, the canonical checks,
// the signature and the inclusion proof.
func BenchmarkVerifyReceipt(b *testing.B) {
	s, v := testKey(b, origin, 7)
	tr := tree(b, 100000)
	r, err := tr.Receipt(4242, sign(b, tr, s, tr.Size()), tr.Size())
	if err != nil {
		b.Fatal(err)
	}
	text := r.Marshal()
	b.ResetTimer()
	for range b.N {
		if _, err := ledger.Verify(text, v); err != nil {
			b.Fatal(err)
		}
	}
}
