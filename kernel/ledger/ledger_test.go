package ledger_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel/ledger"
	tdlog "github.com/transparency-dev/formats/log"
	tdproof "github.com/transparency-dev/formats/proof"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const origin = "leaseplane/acme"

// seedReader hands out a fixed seed, so that keys, notes and goldens are
// the same on every run (Ed25519 signing is deterministic).
func testKey(t testing.TB, origin string, seed byte) (signer, verifier string) {
	t.Helper()
	s, v, err := ledger.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), origin)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// event is a kernel-shaped entry.
func event(i int) []byte {
	return []byte(`{"type":"coordination.lease","atMs":` + strconv.Itoa(1000+i) +
		`,"resource":"lock:r` + strconv.Itoa(i%3) + `","actorDid":"did:web:a` + strconv.Itoa(i) +
		`","leaseId":"lease_` + strconv.Itoa(i) + `","fence":` + strconv.Itoa(i+1) +
		`,"mode":"write","expiresAtMs":` + strconv.Itoa(31000+i) + `,"trustDelta":0}`)
}

func tree(t testing.TB, n int) *ledger.Tree {
	t.Helper()
	var tr ledger.Tree
	for i := range n {
		if _, err := tr.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	return &tr
}

func sign(t testing.TB, tr *ledger.Tree, signer string, n int64) []byte {
	t.Helper()
	c, err := tr.Checkpoint(origin, n)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := ledger.Sign(c, signer)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n got %q\nwant %q", name, got, want)
	}
}

// TestFormats pins the checkpoint, receipt and bundle bytes.
func TestFormats(t *testing.T) {
	s, v := testKey(t, origin, 7)
	tr := tree(t, 5)
	signed := sign(t, tr, s, 5)
	golden(t, "key.vkey", []byte(v+"\n"))
	// Another key of the same name, for tests that swap the key.
	_, other := testKey(t, origin, 8)
	golden(t, "other.vkey", []byte(other+"\n"))
	golden(t, "checkpoint.note", signed)
	r, err := tr.Receipt(3, signed, 5)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "receipt.txt", r.Marshal())
	golden(t, "bundle.json", tr.Bundle(signed).Marshal())
	if !strings.HasPrefix(string(signed), origin+"\n5\n") {
		t.Errorf("checkpoint does not start with the origin and size lines: %q", signed)
	}
}

func TestVerifierOf(t *testing.T) {
	s, v := testKey(t, origin, 9)
	got, err := ledger.VerifierOf(s)
	if err != nil || got != v {
		t.Fatalf("VerifierOf = %q, %v; want %q", got, err, v)
	}
	if _, err := ledger.Sign(ledger.Checkpoint{Origin: "leaseplane/other"}, s); err == nil {
		t.Error("Sign accepted a key named for another origin")
	}
}

// TestInteropTransparencyDev checks our trees, proofs, receipts and
// checkpoints with transparency-dev's formats and merkle packages, for every
// entry of every tree size up to 17 and every pair of sizes.
func TestInteropTransparencyDev(t *testing.T) {
	s, v := testKey(t, origin, 1)
	verifier, err := note.NewVerifier(v)
	if err != nil {
		t.Fatal(err)
	}
	const max = 17
	tr := tree(t, max)
	roots := make([][]byte, max+1)
	for n := int64(0); n <= max; n++ {
		root, err := tr.Root(n)
		if err != nil {
			t.Fatal(err)
		}
		roots[n] = root[:]
	}
	for n := int64(1); n <= max; n++ {
		signed := sign(t, tr, s, n)
		cp, _, _, err := tdlog.ParseCheckpoint(signed, origin, verifier)
		if err != nil {
			t.Fatalf("size %d: transparency-dev refuses our checkpoint: %v", n, err)
		}
		if cp.Size != uint64(n) || !bytes.Equal(cp.Hash, roots[n]) {
			t.Fatalf("size %d: transparency-dev reads size %d root %x", n, cp.Size, cp.Hash)
		}
		for i := int64(0); i < n; i++ {
			r, err := tr.Receipt(i, signed, n)
			if err != nil {
				t.Fatal(err)
			}
			text := r.Marshal()
			var p tdproof.TLogProof
			if err := p.Unmarshal(text); err != nil {
				t.Fatalf("size %d entry %d: TLogProof.Unmarshal: %v", n, i, err)
			}
			if !bytes.Equal(p.Marshal(), text) {
				t.Fatalf("size %d entry %d: TLogProof writes other bytes:\n%q\n%q", n, i, p.Marshal(), text)
			}
			if p.Index != uint64(i) || !bytes.Equal(p.ExtraData, tr.Entry(i)) || !bytes.Equal(p.Checkpoint, signed) {
				t.Fatalf("size %d entry %d: TLogProof reads index %d extra %q", n, i, p.Index, p.ExtraData)
			}
			hashes := make([][]byte, len(p.Hashes))
			for k := range p.Hashes {
				hashes[k] = p.Hashes[k][:]
			}
			leaf := rfc6962.DefaultHasher.HashLeaf(p.ExtraData)
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, cp.Size, leaf, hashes, cp.Hash); err != nil {
				t.Fatalf("size %d entry %d: merkle VerifyInclusion: %v", n, i, err)
			}
			if _, _, err := ledger.VerifyReceipt(text, v); err != nil {
				t.Fatalf("size %d entry %d: VerifyReceipt: %v", n, i, err)
			}
		}
	}
	for n := int64(0); n <= max; n++ {
		for m := int64(0); m <= n; m++ {
			p, err := ledger.ProveConsistency(n, m, tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := ledger.CheckConsistency(p, n, ledger.Hash(roots[n]), m, ledger.Hash(roots[m])); err != nil {
				t.Fatalf("%d→%d: %v", m, n, err)
			}
			hashes := make([][]byte, len(p))
			for k := range p {
				hashes[k] = p[k][:]
			}
			if err := proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(m), uint64(n), hashes, roots[m], roots[n]); err != nil {
				t.Fatalf("%d→%d: merkle VerifyConsistency: %v", m, n, err)
			}
			if m > 0 && m < n {
				bad := ledger.Hash(roots[m])
				bad[0] ^= 1
				if err := ledger.CheckConsistency(p, n, ledger.Hash(roots[n]), m, bad); err == nil {
					t.Fatalf("%d→%d: a wrong old root passed", m, n)
				}
			}
		}
	}
}

// signedTree is a tree of n entries with its checkpoint signed by the
// test key of seed 7, the receipt of entry i, and the verifier key.
func signedTree(t *testing.T, n int, i int64) (tr *ledger.Tree, signed []byte, r ledger.Receipt, verifier string) {
	t.Helper()
	s, v := testKey(t, origin, 7)
	tr = tree(t, n)
	signed = sign(t, tr, s, int64(n))
	r, err := tr.Receipt(i, signed, int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return tr, signed, r, v
}

func TestVerifySummaries(t *testing.T) {
	tr, signed, r, v := signedTree(t, 5, 3)
	for _, tc := range []struct {
		name, data, want string
	}{
		{"receipt", string(r.Marshal()), "receipt holds: entry 3 (coordination.lease lease_3) is in the leaseplane/acme tree of size 5"},
		{"bundle", string(tr.Bundle(signed).Marshal()), "bundle holds: 5 entries make the leaseplane/acme tree of size 5"},
	} {
		got, err := ledger.Verify([]byte(tc.data), v)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.HasPrefix(got.Summary(), tc.want) {
			t.Errorf("%s: summary %q, want it to start %q", tc.name, got.Summary(), tc.want)
		}
	}
	if _, err := ledger.Verify([]byte("hello"), v); err == nil {
		t.Error("Verify accepted neither a receipt nor a bundle")
	}
}

// TestTamperEveryByte changes each byte of a small bundle and of a receipt
// in seven ways: verification fails every time, with a message.
func TestTamperEveryByte(t *testing.T) {
	tr, signed, r, v := signedTree(t, 3, 1)
	for _, doc := range []struct {
		name string
		data []byte
	}{{"bundle", tr.Bundle(signed).Marshal()}, {"receipt", r.Marshal()}} {
		if _, err := ledger.Verify(doc.data, v); err != nil {
			t.Fatalf("%s: the untouched document fails: %v", doc.name, err)
		}
		tried := 0
		for i := range doc.data {
			// Flips of the low bits and the case bit turn a digit, letter
			// or base64 character into another one; the rest break the
			// syntax around it.
			subs := []byte{' ', '"', '\n', doc.data[i] ^ 1, doc.data[i] ^ 2, doc.data[i] ^ 0x20, doc.data[i] ^ 0x80}
			for _, c := range subs {
				if c == doc.data[i] {
					continue
				}
				bad := bytes.Clone(doc.data)
				bad[i] = c
				tried++
				if _, err := ledger.Verify(bad, v); err == nil {
					t.Fatalf("%s: byte %d changed from %q to %q still verifies", doc.name, i, doc.data[i], c)
				} else if err.Error() == "" {
					t.Fatalf("%s: byte %d: an empty error", doc.name, i)
				}
			}
		}
		t.Logf("%s: %d bytes, %d tampered copies all refused", doc.name, len(doc.data), tried)
	}
}

// TestTamperNamesWhatBroke edits a bundle the ways an attacker would and
// checks the error names the part that broke.
func TestTamperNamesWhatBroke(t *testing.T) {
	s, v := testKey(t, origin, 7)
	_, other := testKey(t, origin, 8)
	tr := tree(t, 4)
	signed := sign(t, tr, s, 4)
	good := string(tr.Bundle(signed).Marshal())
	lines := strings.Split(good, "\n")
	// lines: 0 checkpoint+entries[, 1..4 entries, 5 "]}", 6 "".
	reorder := slicesSwap(lines, 2, 3)
	drop := append(append([]string{}, lines[:2]...), lines[3:]...)
	r, _ := tr.Receipt(2, signed, 4)
	receipt := string(r.Marshal())
	rl := strings.Split(receipt, "\n")
	for _, tc := range []struct {
		name, data, key, want string
	}{
		{"other key", good, other, "checkpoint signature: no signature by the verifier key"},
		{"dropped entry", strings.Join(drop, "\n"), v, "entry 1: its index is 2, want 1"},
		{"reordered entries", strings.Join(reorder, "\n"), v, "entry 1: its index is 2, want 1"},
		{"event differs from data", strings.Replace(good, `"atMs":1002,`, `"atMs":1003,`, 1), v, "entry 2: its event is not exactly its data"},
		{"wrong size", strings.Replace(good, `\n4\n`, `\n5\n`, 1), v, "checkpoint signature: the signature by leaseplane/acme does not verify"},
		{"extra signature", strings.Replace(good, `"checkpoint":"`, `"checkpoint":"`, 1)[:0] + addSig(good), v, "want exactly one signature line"},
		{"not canonical", strings.Replace(good, `"entries":[`, `"entries": [`, 1), v, "bundle: not in canonical form"},
		{"receipt hash", strings.Replace(receipt, rl[3], flipB64(rl[3]), 1), v, "receipt: the inclusion proof of entry 2 does not lead to the root"},
		{"receipt entry", strings.Replace(receipt, rl[1], "extra "+flipB64(rl[1][6:]), 1), v, "receipt: the inclusion proof of entry 2"},
		{"receipt index", strings.Replace(receipt, "index 2", "index 02", 1), v, "receipt: the index \"02\" is not a canonical decimal"},
		{"receipt other key", receipt, other, "checkpoint signature: no signature"},
	} {
		_, err := ledger.Verify([]byte(tc.data), tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func slicesSwap(s []string, i, j int) []string {
	c := append([]string{}, s...)
	c[i], c[j] = c[j], c[i]
	return c
}

// flipB64 changes the first base64 character of s to another valid one.
func flipB64(s string) string {
	c := byte('A')
	if s[0] == 'A' {
		c = 'B'
	}
	return string(c) + s[1:]
}

// addSig appends a second signature line (by another key) to the bundle's
// checkpoint.
func addSig(bundle string) string {
	i := strings.Index(bundle, `\n\n\u2014 `)
	if i < 0 {
		i = strings.Index(bundle, "\\n\\n\u2014 ")
	}
	j := strings.Index(bundle, `","entries"`)
	line := bundle[i+4 : j]
	return bundle[:j] + line + bundle[j:]
}

// TestNonCanonicalBase64 spells the signature and a proof hash with
// non-zero padding bits: the same bytes to a lenient decoder, refused here.
func TestNonCanonicalBase64(t *testing.T) {
	s, v := testKey(t, origin, 7)
	tr := tree(t, 4)
	signed := sign(t, tr, s, 4)
	sigLine := string(signed[strings.LastIndex(string(signed), " ")+1 : len(signed)-1])
	// The signature is 68 bytes: base64 ends in "==" after a character whose
	// low 4 bits are padding.
	alt := lenient(sigLine)
	badNote := strings.Replace(string(signed), sigLine, alt, 1)
	if _, err := note.Open([]byte(badNote), mustVerifiers(t, v)); err != nil {
		t.Fatalf("the lenient spelling should still open with note.Open: %v", err)
	}
	if _, err := ledger.Open([]byte(badNote), v); err == nil || !strings.Contains(err.Error(), "canonical") {
		t.Errorf("a non-canonical signature spelling: %v", err)
	}
	r, _ := tr.Receipt(1, signed, 4)
	text := string(r.Marshal())
	h := strings.Split(text, "\n")[3]
	if _, err := ledger.Verify([]byte(strings.Replace(text, h, lenient(h), 1)), v); err == nil || !strings.Contains(err.Error(), "canonical") {
		t.Errorf("a non-canonical proof hash spelling: %v", err)
	}
}

// lenient changes the padding bits of a padded base64 string's last data
// character, which StdEncoding ignores.
func lenient(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	k := strings.IndexByte(s, '=') - 1
	c := strings.IndexByte(alphabet, s[k])
	return s[:k] + string(alphabet[c|1]) + s[k+1:]
}

func mustVerifiers(t *testing.T, v string) note.Verifiers {
	vv, err := note.NewVerifier(v)
	if err != nil {
		t.Fatal(err)
	}
	return note.VerifierList(vv)
}
