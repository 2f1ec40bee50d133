//go:build wasip1

// Command ledger is kernel/ledger built as a GOOS=wasip1 reactor for the
// Workers tier's Durable Object (cmd/worker/workspace.mjs): the object keeps
// the entries and the stored tree hashes in its SQLite storage, and this
// module does every hash, proof and signature with the same Go code as the
// server, so there is no Merkle math in JavaScript.
//
// The kernel's own reactor (wasm/wasip1) stays as the server runs it; the
// ledger is a module of its own because the object needs it beside the
// kernel, not in it, and the server's build has no use for it.
//
// # ABI
//
// As in wasm/wasip1: _initialize first; the host writes inputs into the
// buffer lg_buffer returns; a u64 result packs ptr<<32|len of bytes valid
// until the next call, bit 63 flagging an error message. Import:
//
//	leaseplane.read_hashes(indexes *i64, n u32, out *[32]byte) u32
//	    the host writes the n stored hashes named by indexes to out;
//	    0 when it did, 1 when one is missing
//
// Exports:
//
//	lg_buffer(size u32) u32                    input buffer of ≥ size bytes
//	lg_events(n u32) u64                       the events array in input[0:n],
//	                                           split: per element a u32 length
//	                                           and its bytes, exactly as given
//	lg_append(i i64, n u32) u64                the stored hashes (32 bytes each)
//	                                           to add with entry i = input[0:n]
//	lg_checkpoint(size i64, o u32, s u32) u64  the checkpoint of the first size
//	                                           entries with origin input[0:o],
//	                                           signed with key input[o:o+s]
//	lg_inclusion(size i64, i i64) u64          proof hashes, 32 bytes each
//	lg_consistency(size i64, m i64) u64        proof hashes, 32 bytes each
//	lg_receipt(i i64, size i64, c u32, e u32) u64
//	                                           the tlog-proof@v1 receipt of entry
//	                                           i = input[c:c+e] under the signed
//	                                           checkpoint input[0:c] of size size
//	lg_keygen(o u32) u64                       "signer\nverifier" for origin
//	                                           input[0:o] (randomness: WASI)
//	lg_pack(n u32) u64                         the row (kernel/ledger/rows) of the
//	                                           entries in input[0:n], each an i64
//	                                           seq, an i64 time, a u32 length and
//	                                           its bytes (little-endian)
//	lg_unpack(n u32) u64                       the entries of the row input[0:n],
//	                                           in lg_pack's input form
//	lg_semantics() u32                         kernel.Semantics of this build,
//	                                           which is the kernel's own build
//	                                           from the same sources: the
//	                                           object records it with each
//	                                           logged command
package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/kernel/ledger/rows"
)

func main() {}

const errFlag = 1 << 63

var (
	input []byte
	out   []byte
)

//go:wasmimport leaseplane read_hashes
func readHashes(indexes unsafe.Pointer, n uint32, out unsafe.Pointer) uint32

// hostHashes reads stored hashes from the object's storage.
type hostHashes struct{}

func (hostHashes) ReadHashes(indexes []int64) ([]ledger.Hash, error) {
	hs := make([]ledger.Hash, len(indexes))
	if len(indexes) == 0 {
		return hs, nil
	}
	if readHashes(unsafe.Pointer(&indexes[0]), uint32(len(indexes)), unsafe.Pointer(&hs[0])) != 0 {
		return nil, errors.New("a stored hash is missing from the object's storage")
	}
	return hs, nil
}

func region(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))<<32 | uint64(len(b))
}

func result(b []byte, err error) uint64 {
	if err != nil {
		out = []byte(err.Error())
		return region(out) | errFlag
	}
	out = b
	if len(out) == 0 {
		return 0
	}
	return region(out)
}

func in(a, b uint32) ([]byte, error) {
	if uint64(a)+uint64(b) > uint64(len(input)) {
		return nil, errors.New("lengths beyond the input buffer")
	}
	return input[a : a+b], nil
}

// inTwo is the input of two parts: its first a bytes and the b after them.
func inTwo(a, b uint32) (first, second []byte, err error) {
	if first, err = in(0, a); err != nil {
		return nil, nil, err
	}
	second, err = in(a, b)
	return first, second, err
}

func hashes(hs []ledger.Hash, err error) uint64 {
	if err != nil {
		return result(nil, err)
	}
	b := make([]byte, 0, 32*len(hs))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return result(b, nil)
}

//go:wasmexport lg_buffer
func buffer(size uint32) uint32 {
	if int(size) > cap(input) || input == nil {
		input = make([]byte, max(int(size), 4096))
	}
	input = input[:cap(input)]
	return uint32(uintptr(unsafe.Pointer(&input[0])))
}

//go:wasmexport lg_events
func events(n uint32) uint64 {
	b, err := in(0, n)
	if err != nil {
		return result(nil, err)
	}
	var o []byte
	err = kernel.ScanArray(b, func(elem []byte) error {
		o = binary.LittleEndian.AppendUint32(o, uint32(len(elem)))
		o = append(o, elem...)
		return nil
	})
	return result(o, err)
}

//go:wasmexport lg_append
func appendEntry(i int64, n uint32) uint64 {
	b, err := in(0, n)
	if err != nil {
		return result(nil, err)
	}
	return hashes(ledger.StoredHashes(i, b, hostHashes{}))
}

//go:wasmexport lg_checkpoint
func checkpoint(size int64, o, s uint32) uint64 {
	origin, signer, err := inTwo(o, s)
	if err != nil {
		return result(nil, err)
	}
	root, err := ledger.TreeHash(size, hostHashes{})
	if err != nil {
		return result(nil, err)
	}
	return result(ledger.Sign(ledger.Checkpoint{Origin: string(origin), Size: size, Root: root}, string(signer)))
}

//go:wasmexport lg_inclusion
func inclusion(size, i int64) uint64 {
	return hashes(ledger.ProveInclusion(size, i, hostHashes{}))
}

//go:wasmexport lg_consistency
func consistency(size, m int64) uint64 {
	return hashes(ledger.ProveConsistency(size, m, hostHashes{}))
}

//go:wasmexport lg_receipt
func receipt(i, size int64, c, e uint32) uint64 {
	ckpt, entry, err := inTwo(c, e)
	if err != nil {
		return result(nil, err)
	}
	proof, err := ledger.ProveInclusion(size, i, hostHashes{})
	if err != nil {
		return result(nil, err)
	}
	r := ledger.Receipt{Index: i, Proof: proof, Checkpoint: ckpt, Entry: entry}
	return result(r.Marshal(), nil)
}

//go:wasmexport lg_keygen
func keygen(o uint32) uint64 {
	origin, err := in(0, o)
	if err != nil {
		return result(nil, err)
	}
	signer, verifier, err := ledger.GenerateKey(rand.Reader, string(origin))
	if err != nil {
		return result(nil, err)
	}
	return result([]byte(signer+"\n"+verifier), nil)
}

// The object stores its ledger's entries as the server does: packed 32 to a
// row by kernel/ledger/rows, one code for both.
var (
	packer    rows.Packer
	rowReader rows.Reader
)

//go:wasmexport lg_pack
func pack(n uint32) uint64 {
	b, err := in(0, n)
	if err != nil {
		return result(nil, err)
	}
	var es []rows.Entry
	for len(b) > 0 {
		if len(b) < 20 {
			return result(nil, errors.New("an entry to pack is cut short"))
		}
		l := binary.LittleEndian.Uint32(b[16:20])
		if uint64(len(b)-20) < uint64(l) {
			return result(nil, errors.New("an entry to pack is cut short"))
		}
		es = append(es, rows.Entry{Seq: int64(binary.LittleEndian.Uint64(b)), Time: int64(binary.LittleEndian.Uint64(b[8:])), Data: b[20 : 20+l]})
		b = b[20+l:]
	}
	return result(packer.Pack(es))
}

//go:wasmexport lg_unpack
func unpack(n uint32) uint64 {
	b, err := in(0, n)
	if err != nil {
		return result(nil, err)
	}
	es, err := rowReader.Unpack(b, nil)
	if err != nil {
		return result(nil, err)
	}
	var o []byte
	for _, e := range es {
		o = binary.LittleEndian.AppendUint64(o, uint64(e.Seq))
		o = binary.LittleEndian.AppendUint64(o, uint64(e.Time))
		o = binary.LittleEndian.AppendUint32(o, uint32(len(e.Data)))
		o = append(o, e.Data...)
	}
	return result(o, nil)
}

//go:wasmexport lg_semantics
func semantics() uint32 { return kernel.Semantics }

// lg_check_root tells whether input[0:n], a base64 hash, is the root of
// the tree of size entries: one byte, 1 or 0; an error when it is not a
// base64 hash of 32 bytes (the exported route's check, as the server's).
//
//go:wasmexport lg_check_root
func checkRoot(size int64, n uint32) uint64 {
	b, err := in(0, n)
	if err != nil {
		return result(nil, err)
	}
	want, err := ledger.ParseHash(string(b))
	if err != nil {
		return result(nil, err)
	}
	root, err := ledger.TreeHash(size, hostHashes{})
	if err != nil {
		return result(nil, err)
	}
	if root != want {
		return result([]byte{0}, nil)
	}
	return result([]byte{1}, nil)
}
