package ledger

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// ReceiptHeader is the first line of a receipt (C2SP tlog-proof@v1).
const ReceiptHeader = "c2sp.org/tlog-proof@v1"

// Receipt proves that one entry is in a signed tree: the entry's index,
// its inclusion proof, the signed checkpoint and, as the proof's extra
// data, the entry's bytes.
type Receipt struct {
	Index      int64
	Proof      []Hash
	Checkpoint []byte // the signed note
	Entry      []byte
}

// Marshal writes the receipt in the C2SP tlog-proof@v1 text form:
//
//	c2sp.org/tlog-proof@v1
//	extra <base64 of the entry>
//	index <decimal>
//	<base64 hash>...
//	<blank line>
//	<signed checkpoint>
func (r Receipt) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(ReceiptHeader + "\n")
	b.WriteString("extra ")
	b.WriteString(base64.StdEncoding.EncodeToString(r.Entry))
	b.WriteString("\nindex ")
	b.WriteString(strconv.FormatInt(r.Index, 10))
	b.WriteByte('\n')
	for _, h := range r.Proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(r.Checkpoint)
	return b.Bytes()
}

// ParseReceipt reads a receipt, accepting only the form Marshal writes.
func ParseReceipt(text []byte) (Receipt, error) {
	var r Receipt
	rest := string(text)
	line := func() (string, bool) {
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			return "", false
		}
		l := rest[:i]
		rest = rest[i+1:]
		return l, true
	}
	if l, ok := line(); !ok || l != ReceiptHeader {
		return r, errors.New("receipt: the first line is not " + ReceiptHeader)
	}
	l, ok := line()
	extra, found := strings.CutPrefix(l, "extra ")
	if !ok || !found {
		return r, errors.New("receipt: the second line is not \"extra \" and the entry in base64")
	}
	entry, err := decodeBase64(extra)
	if err != nil {
		return r, errors.New("receipt: the entry (extra) " + err.Error())
	}
	r.Entry = entry
	l, ok = line()
	idx, found := strings.CutPrefix(l, "index ")
	if !ok || !found {
		return r, errors.New("receipt: the third line is not \"index \" and the entry's index")
	}
	r.Index, err = strconv.ParseInt(idx, 10, 64)
	if err != nil || r.Index < 0 || strconv.FormatInt(r.Index, 10) != idx {
		return r, errors.New("receipt: the index " + strconv.Quote(idx) + " is not a canonical decimal")
	}
	for {
		l, ok = line()
		if !ok {
			return r, errors.New("receipt: no blank line before the checkpoint")
		}
		if l == "" {
			break
		}
		h, err := decodeHash(l)
		if err != nil {
			return r, errors.New("receipt: proof hash " + strconv.Itoa(len(r.Proof)) + " " + err.Error())
		}
		r.Proof = append(r.Proof, h)
		if len(r.Proof) > 64 {
			return r, errors.New("receipt: more than 64 proof hashes")
		}
	}
	r.Checkpoint = []byte(rest)
	if !bytes.Equal(r.Marshal(), text) {
		return r, errors.New("receipt: not in canonical form")
	}
	return r, nil
}

// VerifyReceipt checks a receipt against verifier: the checkpoint's
// signature, and the entry's inclusion in the checkpoint's tree.
func VerifyReceipt(text []byte, verifier string) (Receipt, Checkpoint, error) {
	r, err := ParseReceipt(text)
	if err != nil {
		return r, Checkpoint{}, err
	}
	c, err := Open(r.Checkpoint, verifier)
	if err != nil {
		return r, c, err
	}
	if err := CheckInclusion(r.Proof, c.Size, c.Root, r.Index, LeafHash(r.Entry)); err != nil {
		return r, c, errors.New("receipt: " + err.Error() + " signed in the checkpoint")
	}
	return r, c, nil
}
