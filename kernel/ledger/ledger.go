package ledger

import (
	"errors"
	"strconv"

	"golang.org/x/mod/sumdb/tlog"
)

// Hash is a tree or leaf hash (SHA-256).
type Hash = tlog.Hash

// HashReader reads stored hashes by their tlog index; a host's storage
// implements it.
type HashReader = tlog.HashReader

// HashReaderFunc is a function as a HashReader.
type HashReaderFunc = tlog.HashReaderFunc

// ParseHash decodes a base64 hash, accepting only its canonical spelling.
func ParseHash(s string) (Hash, error) { return decodeHash(s) }

// OriginPrefix starts every origin: leaseplane/<workspace>, or
// <host>/leaseplane/<workspace> when the server knows its public host name.
const OriginPrefix = "leaseplane/"

// Origin is the origin line (and signing key name) of a workspace's ledger;
// host is empty unless the server was told its public host name.
func Origin(host, workspace string) string {
	if host == "" {
		return OriginPrefix + workspace
	}
	return host + "/" + OriginPrefix + workspace
}

// LeafHash is an entry's leaf hash: SHA-256(0x00 ‖ entry).
func LeafHash(entry []byte) Hash { return tlog.RecordHash(entry) }

// StoredHashes are the hashes to store when entry n (counting from 0) is
// appended to a tree whose stored hashes r reads (tlog's layout).
func StoredHashes(n int64, entry []byte, r HashReader) ([]Hash, error) {
	return tlog.StoredHashes(n, entry, r)
}

// StoredHashCount is how many hashes a tree of n entries stores.
func StoredHashCount(n int64) int64 { return tlog.StoredHashCount(n) }

// TreeHash is the root of the first n entries.
func TreeHash(n int64, r HashReader) (Hash, error) { return tlog.TreeHash(n, r) }

// ProveInclusion is the inclusion proof of entry i in the tree of size n.
func ProveInclusion(n, i int64, r HashReader) ([]Hash, error) {
	if i < 0 || i >= n {
		return nil, errors.New("entry " + itoa(i) + " is not in a tree of size " + itoa(n))
	}
	return tlog.ProveRecord(n, i, r)
}

// ProveConsistency is the proof that the tree of size m is a prefix of the
// tree of size n (m ≤ n).
func ProveConsistency(n, m int64, r HashReader) ([]Hash, error) {
	if m < 0 || m > n {
		return nil, errors.New("a tree of size " + itoa(m) + " is not a prefix of one of size " + itoa(n))
	}
	if m == 0 {
		return nil, nil // the empty tree is a prefix of every tree
	}
	return tlog.ProveTree(n, m, r)
}

// CheckInclusion checks that entry i, of leaf hash leaf, is in the tree of
// size n and root root.
func CheckInclusion(proof []Hash, n int64, root Hash, i int64, leaf Hash) error {
	if i < 0 || i >= n {
		return errors.New("entry " + itoa(i) + " is not in a tree of size " + itoa(n))
	}
	if err := tlog.CheckRecord(proof, n, root, i, leaf); err != nil {
		return errors.New("the inclusion proof of entry " + itoa(i) + " does not lead to the root of the tree of size " + itoa(n))
	}
	return nil
}

// CheckConsistency checks that the tree of size m and root mroot is a prefix
// of the tree of size n and root nroot.
func CheckConsistency(proof []Hash, n int64, nroot Hash, m int64, mroot Hash) error {
	if m < 0 || m > n {
		return errors.New("a tree of size " + itoa(m) + " is not a prefix of one of size " + itoa(n))
	}
	if m == 0 {
		if len(proof) != 0 {
			return errors.New("a consistency proof from the empty tree has no hashes")
		}
		return nil
	}
	if err := tlog.CheckTree(proof, n, nroot, m, mroot); err != nil {
		return errors.New("the tree of size " + itoa(m) + " is not a prefix of the tree of size " + itoa(n) + ": the consistency proof fails")
	}
	return nil
}

// Tree is a whole ledger in memory: its entries and stored hashes. The
// browser's playground and tests use it; the server keeps the same hashes in
// SQLite. The zero Tree is empty and ready.
type Tree struct {
	entries [][]byte
	hashes  storedHashes
}

// ReadHashes reads stored hashes by index (tlog.HashReader).
func (t *Tree) ReadHashes(indexes []int64) ([]Hash, error) { return t.hashes.ReadHashes(indexes) }

// storedHashes are a tree's stored hashes in tlog's order.
type storedHashes []Hash

// ReadHashes reads stored hashes by index (tlog.HashReader).
func (s storedHashes) ReadHashes(indexes []int64) ([]Hash, error) {
	out := make([]Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s)) {
			return nil, errors.New("stored hash " + itoa(x) + " is not in the tree")
		}
		out[i] = s[x]
	}
	return out, nil
}

// Append adds an entry and returns its index.
func (t *Tree) Append(entry []byte) (int64, error) {
	n := int64(len(t.entries))
	hs, err := tlog.StoredHashes(n, entry, t)
	if err != nil {
		return 0, err
	}
	t.entries = append(t.entries, append([]byte(nil), entry...))
	t.hashes = append(t.hashes, hs...)
	return n, nil
}

// Size is the number of entries.
func (t *Tree) Size() int64 { return int64(len(t.entries)) }

// Entry is entry i's bytes.
func (t *Tree) Entry(i int64) []byte { return t.entries[i] }

// Root is the root hash of the first n entries.
func (t *Tree) Root(n int64) (Hash, error) {
	if n < 0 || n > t.Size() {
		return Hash{}, errors.New("the tree has no prefix of size " + itoa(n))
	}
	return tlog.TreeHash(n, t)
}

// Checkpoint is the unsigned checkpoint of the first n entries.
func (t *Tree) Checkpoint(origin string, n int64) (Checkpoint, error) {
	root, err := t.Root(n)
	return Checkpoint{Origin: origin, Size: n, Root: root}, err
}

// Receipt is the receipt of entry i under signedCheckpoint, a signed note
// over a tree of this one's entries.
func (t *Tree) Receipt(i int64, signedCheckpoint []byte, size int64) (Receipt, error) {
	proof, err := ProveInclusion(size, i, t)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{Index: i, Proof: proof, Checkpoint: signedCheckpoint, Entry: t.entries[i]}, nil
}

// Bundle is the whole tree's bundle under signedCheckpoint, which must be
// of size t.Size().
func (t *Tree) Bundle(signedCheckpoint []byte) Bundle {
	return Bundle{Checkpoint: signedCheckpoint, Entries: t.entries}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
