package rows

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

func event(i int) []byte {
	return []byte(`{"type":"coordination.lease","atMs":` + strconv.Itoa(1796156892087+i) + `,"resource":"lock:job/` + strconv.Itoa(i) +
		`","class":"exclusive","actorDid":"did:web:acme.example:agent:w` + strconv.Itoa(i%7) + `","leaseId":"lease_33b2fe543d3785fd","fence":` +
		strconv.Itoa(i+1) + `,"mode":"write","expiresAtMs":` + strconv.Itoa(1796156922087+i) + `,"trustDelta":0}`)
}

// TestPackUnpack: every row size unpacks to the same seqs and bytes, with
// one Packer and one Reader reused, seqs going down as well as up.
func TestPackUnpack(t *testing.T) {
	var p Packer
	var r Reader
	for n := 1; n <= Size; n++ {
		var in []Entry
		for i := range n {
			in = append(in, Entry{Seq: int64(1000 + i*3 - (i%2)*5), Time: int64(1796156892087 + i*20 - (i%3)*7), Data: event(i)})
		}
		in = append(in[:0:0], in...)
		in[0].Data = nil // an empty entry is kept as empty
		row, err := p.Pack(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Unpack(row, nil)
		if err != nil {
			t.Fatalf("%d entries: %v", n, err)
		}
		if len(out) != n {
			t.Fatalf("%d entries unpacked to %d", n, len(out))
		}
		for i := range out {
			if out[i].Seq != in[i].Seq || out[i].Time != in[i].Time || !bytes.Equal(out[i].Data, in[i].Data) {
				t.Fatalf("%d entries: entry %d came back as %d %q", n, i, out[i].Seq, out[i].Data)
			}
		}
		if n == Size && len(row) > Size*60 {
			t.Errorf("a full row of similar events packs to %d bytes, more than 60 an entry", len(row))
		}
	}
	if _, err := p.Pack(nil); err == nil {
		t.Error("an empty row packed")
	}
	if _, err := p.Pack(make([]Entry, Size+1)); err == nil {
		t.Error("a row of 33 entries packed")
	}
}

// TestUnpackDamaged: a row cut short, with a wrong version byte or with any
// byte changed is refused (or unpacks to the same entries).
func TestUnpackDamaged(t *testing.T) {
	var p Packer
	var r Reader
	row, err := p.Pack([]Entry{{Seq: 1, Data: event(1)}, {Seq: 2, Data: event(2)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, {}, {2}, append([]byte{9}, row[1:]...), row[:len(row)/2], row[:1]} {
		if _, err := r.Unpack(bad, nil); !errors.Is(err, ErrDamaged) {
			t.Errorf("row %x: %v, want ErrDamaged", bad, err)
		}
	}
	// A changed byte is refused, or (a padding bit) changes nothing.
	for i := range row {
		b := bytes.Clone(row)
		b[i] ^= 0x10
		out, err := r.Unpack(b, nil)
		if err == nil && (len(out) != 2 || !bytes.Equal(out[0].Data, event(1)) || !bytes.Equal(out[1].Data, event(2)) ||
			out[0].Seq != 1 || out[1].Seq != 2) {
			t.Errorf("byte %d changed: the row unpacked to other entries", i)
		}
	}
}

// TestSubtree: Leaf, Node and Subtree are RFC 6962's, as tlog computes them.
func TestSubtree(t *testing.T) {
	var leaves [][32]byte
	var stored []tlog.Hash
	for i := range Size {
		d := event(i)
		if Leaf(d) != tlog.RecordHash(d) {
			t.Fatalf("leaf %d differs from tlog's", i)
		}
		leaves = append(leaves, Leaf(d))
		hs, err := tlog.StoredHashes(int64(i), d, tlog.HashReaderFunc(func(x []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(x))
			for k, j := range x {
				out[k] = stored[j]
			}
			return out, nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	for level := 0; level <= Height; level++ {
		w := 1 << level
		for n := 0; n < Size/w; n++ {
			scratch := append([][32]byte(nil), leaves[n*w:(n+1)*w]...)
			got, err := Subtree(scratch)
			if err != nil {
				t.Fatal(err)
			}
			if want := stored[tlog.StoredHashIndex(level, int64(n))]; got != want {
				t.Fatalf("subtree level %d index %d differs from tlog's", level, n)
			}
		}
	}
	if _, err := Subtree(make([][32]byte, 3)); err == nil {
		t.Error("a subtree of 3 leaves")
	}
}
