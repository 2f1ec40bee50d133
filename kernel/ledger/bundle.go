package ledger

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
	"golang.org/x/mod/sumdb/tlog"
)

// Bundle is a ledger exported whole: every entry from index 0 and the
// signed checkpoint of the tree they make.
type Bundle struct {
	Checkpoint []byte // the signed note
	Entries    [][]byte
}

// Marshal writes the bundle as JSON, one entry a line:
//
//	{"checkpoint":"<signed note>","entries":[
//	{"index":0,"hash":"<base64 leaf hash>","data":"<base64 entry>","event":<the entry>},
//	...
//	]}
//
// "event" is the entry itself, for people and tools that read the bundle;
// verification requires it to be exactly "data".
func (b Bundle) Marshal() []byte {
	var out bytes.Buffer
	out.WriteString(`{"checkpoint":`)
	out.Write(kernel.AppendQuote(nil, string(b.Checkpoint)))
	out.WriteString(`,"entries":[`)
	for i, e := range b.Entries {
		if i > 0 {
			out.WriteByte(',')
		}
		out.WriteString("\n" + `{"index":`)
		out.WriteString(strconv.Itoa(i))
		h := LeafHash(e)
		out.WriteString(`,"hash":"`)
		out.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		out.WriteString(`","data":"`)
		out.WriteString(base64.StdEncoding.EncodeToString(e))
		out.WriteString(`","event":`)
		out.Write(e)
		out.WriteByte('}')
	}
	out.WriteString("\n]}\n")
	return out.Bytes()
}

// VerifyBundle checks a bundle against verifier: the checkpoint's
// signature; each entry's index, its data, its event (exactly its data)
// and its leaf hash; that the entries are the whole signed tree and hash to
// its root; and that the file is exactly what Marshal writes. The error
// names the first thing that does not hold.
func VerifyBundle(data []byte, verifier string) (Bundle, Checkpoint, error) {
	var b Bundle
	var c Checkpoint
	var rawEntries []byte
	var haveCheckpoint bool
	err := kernel.ScanObject(data, func(name string, raw []byte) error {
		switch name {
		case "checkpoint":
			s, err := kernel.Unquote(raw)
			if err != nil {
				return errors.New("checkpoint is not a JSON string")
			}
			b.Checkpoint, haveCheckpoint = []byte(s), true
		case "entries":
			rawEntries = raw
		default:
			return errors.New("unknown field " + strconv.Quote(name))
		}
		return nil
	})
	if err != nil {
		return b, c, errors.New("bundle: " + err.Error())
	}
	if !haveCheckpoint {
		return b, c, errors.New("bundle: no checkpoint")
	}
	if rawEntries == nil {
		return b, c, errors.New("bundle: no entries")
	}
	if c, err = Open(b.Checkpoint, verifier); err != nil {
		return b, c, errors.New("bundle: " + err.Error())
	}
	var leaves []Hash
	err = kernel.ScanArray(rawEntries, func(elem []byte) error {
		i := len(b.Entries)
		entry, leaf, err := bundleEntry(i, elem)
		if err != nil {
			return errors.New("entry " + strconv.Itoa(i) + ": " + err.Error())
		}
		b.Entries = append(b.Entries, entry)
		leaves = append(leaves, leaf)
		return nil
	})
	if err != nil {
		return b, c, errors.New("bundle: " + err.Error())
	}
	if int64(len(b.Entries)) != c.Size {
		return b, c, errors.New("bundle: it holds " + strconv.Itoa(len(b.Entries)) + " entries; the checkpoint signs a tree of " + itoa(c.Size))
	}
	var t hashTree
	for i, h := range leaves {
		if err := t.appendLeaf(int64(i), h); err != nil {
			return b, c, errors.New("bundle: " + err.Error())
		}
	}
	root, err := tlog.TreeHash(c.Size, &t)
	if err != nil {
		return b, c, errors.New("bundle: " + err.Error())
	}
	if root != c.Root {
		return b, c, errors.New("bundle: the entries' hashes do not make the checkpoint's root hash " + c.Root.String() + " (they make " + root.String() + ")")
	}
	if want := b.Marshal(); !bytes.Equal(want, data) {
		at := 0
		for at < len(want) && at < len(data) && want[at] == data[at] {
			at++
		}
		return b, c, errors.New("bundle: not in canonical form (it differs from the canonical encoding at byte " + strconv.Itoa(at) + ")")
	}
	return b, c, nil
}

// bundleEntry checks entry i of a bundle and returns its bytes and leaf hash.
func bundleEntry(i int, raw []byte) ([]byte, Hash, error) {
	var entry, event []byte
	var leaf Hash
	var haveIndex, haveHash bool
	err := kernel.ScanObject(raw, func(name string, v []byte) error {
		switch name {
		case "index":
			if string(v) != strconv.Itoa(i) {
				return errors.New("its index is " + string(v) + ", want " + strconv.Itoa(i) + " (an entry is missing, added or out of order)")
			}
			haveIndex = true
		case "hash":
			var err error
			leaf, err = decodeStringField(name, v, decodeHash)
			haveHash = err == nil
			return err
		case "data":
			var err error
			entry, err = decodeStringField(name, v, decodeBase64)
			return err
		case "event":
			event = v
		default:
			return errors.New("unknown field " + strconv.Quote(name))
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, leaf, err
	case !haveIndex:
		return nil, leaf, errors.New("no index")
	case !haveHash:
		return nil, leaf, errors.New("no hash")
	case entry == nil:
		return nil, leaf, errors.New("no data")
	case event == nil:
		return nil, leaf, errors.New("no event")
	case !bytes.Equal(event, entry):
		return nil, leaf, errors.New("its event is not exactly its data")
	case kernel.KindOf(entry) != kernel.KindObject:
		return nil, leaf, errors.New("its data is not a JSON object")
	case LeafHash(entry) != leaf:
		return nil, leaf, errors.New("its data does not hash to its hash " + leaf.String())
	}
	return entry, leaf, nil
}

// decodeStringField decodes v, the JSON string of field name, with decode.
func decodeStringField[T any](name string, v []byte, decode func(string) (T, error)) (T, error) {
	var zero T
	s, err := kernel.Unquote(v)
	if err != nil {
		return zero, errors.New(name + " is not a JSON string")
	}
	t, err := decode(s)
	if err != nil {
		return zero, errors.New(name + " " + err.Error())
	}
	return t, nil
}

// hashTree is a tree built from leaf hashes alone.
type hashTree struct{ hashes storedHashes }

func (t *hashTree) ReadHashes(indexes []int64) ([]Hash, error) { return t.hashes.ReadHashes(indexes) }

func (t *hashTree) appendLeaf(n int64, h Hash) error {
	hs, err := tlog.StoredHashesForRecordHash(n, h, t)
	if err != nil {
		return err
	}
	t.hashes = append(t.hashes, hs...)
	return nil
}

// Verified is what Verify found.
type Verified struct {
	Kind       string // "receipt" or "bundle"
	Checkpoint Checkpoint
	Receipt    Receipt // for a receipt
	Entries    int     // for a bundle
}

// Summary is one line that says what holds.
func (v Verified) Summary() string {
	c := v.Checkpoint
	tree := c.Origin + " tree of size " + itoa(c.Size) + " (root " + c.Root.String() + "), signature checked"
	if v.Kind == "receipt" {
		return "receipt holds: entry " + itoa(v.Receipt.Index) + " " + describe(v.Receipt.Entry) + " is in the " + tree
	}
	return "bundle holds: " + strconv.Itoa(v.Entries) + " entries make the " + tree
}

// EntryLease reads an entry's type and lease id ("" where it has none).
func EntryLease(entry []byte) (typ, leaseID string) {
	typ, leaseID, _ = kernel.StringMembers(entry, "type", "leaseId")
	return typ, leaseID
}

// describe names an entry by its type and lease id, where it has them.
func describe(entry []byte) string {
	typ, id := EntryLease(entry)
	switch {
	case typ != "" && id != "":
		return "(" + typ + " " + id + ")"
	case typ != "":
		return "(" + typ + ")"
	}
	return ""
}

// Verify checks a receipt or a bundle, told apart by their first bytes,
// against verifier.
func Verify(data []byte, verifier string) (Verified, error) {
	switch {
	case bytes.HasPrefix(data, []byte(ReceiptHeader)):
		r, c, err := VerifyReceipt(data, verifier)
		return Verified{Kind: "receipt", Checkpoint: c, Receipt: r}, err
	case bytes.HasPrefix(data, []byte("{")):
		b, c, err := VerifyBundle(data, verifier)
		return Verified{Kind: "bundle", Checkpoint: c, Entries: len(b.Entries)}, err
	}
	return Verified{}, errors.New("neither a receipt (" + ReceiptHeader + ") nor a bundle (a JSON object)")
}
