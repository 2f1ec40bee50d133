// Package rows packs a ledger's entries into the rows its hosts store: up to
// Size entries a row, each entry's bytes exactly as they were hashed, the
// row compressed as one DEFLATE stream (compress/flate) under a preset
// dictionary of the strings every event shares. Reading one entry unpacks
// only its row. The server (server/store) and the Workers tier's ledger
// module store their rows with this code, so a row is packed one way.
//
// It also recomputes what a host need not store: an entry's leaf hash and
// the hash of a complete subtree of a row's leaves (RFC 6962), so a host can
// keep only the tree hashes of whole rows and above.
//
// # Format
//
// A row is a version byte (1), the CRC-32 (IEEE, little-endian) of what
// the stream unpacks to, then the DEFLATE stream of: the number of
// entries (uvarint), each entry's seq as the difference from the previous
// one (the first from 0; zig-zag varint), each entry's time likewise, each
// entry's length (uvarint), then the entries' bytes one after the other. Version 1's dictionary is
// fixed forever; a new dictionary is a new version, and readers keep
// reading every version they ever wrote.
//
// The package is pure (standard library only, no clock, no goroutines):
// hosts built for the browser and for wasip1 use it as it is. A Packer and
// a Reader each keep a compressor's state (hundreds of kilobytes for a
// Packer): keep one per goroutine, or pool them.
package rows

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strconv"
)

// Size is the most entries a row holds. A host lays its rows on multiples
// of Size (a row ends where a multiple of Size does), so a full row holds
// one complete subtree of the tree, of height Height.
const Size = 32

// Height is log2(Size): a full row's leaves make one subtree of this height.
const Height = 5

// version1 is the format byte of rows packed with dict1.
const version1 = 1

// maxRowBytes bounds what a row unpacks to (a row holds at most Size
// entries; an event is a few hundred bytes): a damaged or hostile row
// cannot make a reader allocate without end.
const maxRowBytes = 4 << 20

// dict1 is version 1's preset dictionary: the members and values that the
// kernel's events repeat, the most common last (DEFLATE codes near
// distances in fewer bits). Never change it: rows packed with it must stay
// readable.
var dict1 = []byte(`{"type":"operator.suspend","atMs":{"type":"operator.resume","atMs":{"type":"operator.forget","atMs":` +
	`,"class":"read-shared","actorDid":"did:,"mode":"read","mode":"delete",` +
	`{"type":"coordination.revoke","atMs":,"trustDelta":-5}{"type":"coordination.expire","atMs":,"trustDelta":0.5}` +
	`{"type":"coordination.release","atMs":{"type":"coordination.renew","atMs":{"type":"coordination.lease","atMs":` +
	`,"resource":"lock:,"class":"exclusive","actorDid":"did:web:,"leaseId":"lease_,"fence":,"mode":"write","expiresAtMs":,"trustDelta":0}`)

// Entry is one entry of a row: the seq of the command that emitted it and
// its time (integers the host keeps with it: the server's time is when it
// wrote the entry, from which retention counts), and its bytes.
type Entry struct {
	Seq, Time int64
	Data      []byte
}

// Packer packs rows. The zero Packer is ready; it is not safe for
// concurrent use.
type Packer struct {
	w   *flate.Writer
	out bytes.Buffer
	raw []byte
}

// Pack returns entries packed as one row (a new slice). It refuses more
// than Size entries, or none.
func (p *Packer) Pack(entries []Entry) ([]byte, error) {
	if len(entries) == 0 || len(entries) > Size {
		return nil, errors.New("rows: a row holds 1 to " + strconv.Itoa(Size) + " entries, not " + strconv.Itoa(len(entries)))
	}
	raw := binary.AppendUvarint(p.raw[:0], uint64(len(entries)))
	prev := int64(0)
	for _, e := range entries {
		raw = binary.AppendVarint(raw, e.Seq-prev)
		prev = e.Seq
	}
	prev = 0
	for _, e := range entries {
		raw = binary.AppendVarint(raw, e.Time-prev)
		prev = e.Time
	}
	for _, e := range entries {
		raw = binary.AppendUvarint(raw, uint64(len(e.Data)))
	}
	for _, e := range entries {
		raw = append(raw, e.Data...)
	}
	p.raw = raw
	p.out.Reset()
	p.out.WriteByte(version1)
	p.out.Write(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(raw)))
	if p.w == nil {
		w, err := flate.NewWriterDict(&p.out, flate.BestCompression, dict1)
		if err != nil {
			return nil, errors.New("rows: start a compressor: " + err.Error())
		}
		p.w = w
	} else {
		p.w.Reset(&p.out)
	}
	if _, err := p.w.Write(raw); err != nil {
		return nil, errors.New("rows: compress a row: " + err.Error())
	}
	if err := p.w.Close(); err != nil {
		return nil, errors.New("rows: compress a row: " + err.Error())
	}
	return bytes.Clone(p.out.Bytes()), nil
}

// Reader unpacks rows. The zero Reader is ready; it is not safe for
// concurrent use.
type Reader struct {
	r   io.ReadCloser
	src bytes.Reader
	buf bytes.Buffer
}

// ErrDamaged is the error of a row that does not unpack.
var ErrDamaged = errors.New("rows: the row is damaged")

// Unpack appends a row's entries to out and returns it. The entries' Data
// are one new slice of the row's bytes, shared by them (not by the Reader):
// keep them as long as needed.
func (r *Reader) Unpack(row []byte, out []Entry) ([]Entry, error) {
	if len(row) < 5 || row[0] != version1 {
		return out, ErrDamaged
	}
	sum := binary.LittleEndian.Uint32(row[1:5])
	r.src.Reset(row[5:])
	if r.r == nil {
		r.r = flate.NewReaderDict(&r.src, dict1)
	} else if err := r.r.(flate.Resetter).Reset(&r.src, dict1); err != nil {
		return out, ErrDamaged
	}
	r.buf.Reset()
	n, err := r.buf.ReadFrom(io.LimitReader(r.r, maxRowBytes+1))
	if err != nil || n > maxRowBytes {
		return out, ErrDamaged
	}
	if crc32.ChecksumIEEE(r.buf.Bytes()) != sum {
		return out, ErrDamaged
	}
	raw := bytes.Clone(r.buf.Bytes())
	count, k := binary.Uvarint(raw)
	if k <= 0 || count == 0 || count > Size {
		return out, ErrDamaged
	}
	raw = raw[k:]
	var seqs, times, lens [Size]int64
	for _, col := range []*[Size]int64{&seqs, &times} {
		prev := int64(0)
		for i := range count {
			d, k := binary.Varint(raw)
			if k <= 0 {
				return out, ErrDamaged
			}
			prev += d
			col[i] = prev
			raw = raw[k:]
		}
	}
	total := uint64(0)
	for i := range count {
		l, k := binary.Uvarint(raw)
		if k <= 0 || l > uint64(len(raw)) {
			return out, ErrDamaged
		}
		lens[i] = int64(l)
		total += l
		raw = raw[k:]
	}
	if total != uint64(len(raw)) {
		return out, ErrDamaged
	}
	for i := range count {
		out = append(out, Entry{Seq: seqs[i], Time: times[i], Data: raw[:lens[i]:lens[i]]})
		raw = raw[lens[i]:]
	}
	return out, nil
}

// Leaf is an entry's leaf hash, SHA-256(0x00 ‖ data) (RFC 6962).
func Leaf(data []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(data)
	return [32]byte(h.Sum(nil))
}

// Node is the hash of an interior node, SHA-256(0x01 ‖ left ‖ right).
func Node(left, right [32]byte) [32]byte {
	var b [65]byte
	b[0] = 1
	copy(b[1:], left[:])
	copy(b[33:], right[:])
	return sha256.Sum256(b[:])
}

// Subtree is the hash of the complete subtree whose leaves are leaves (a
// power of two of them, at least one); it reuses leaves as scratch space.
func Subtree(leaves [][32]byte) ([32]byte, error) {
	n := len(leaves)
	if n == 0 || n&(n-1) != 0 {
		return [32]byte{}, errors.New("rows: a complete subtree has a power of two of leaves, not " + strconv.Itoa(n))
	}
	for ; n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			leaves[i] = Node(leaves[2*i], leaves[2*i+1])
		}
	}
	return leaves[0], nil
}
