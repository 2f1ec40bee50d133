package kernel

import (
	"encoding/binary"
	"errors"
)

// The command record is a Command laid out as bytes, for hosts that carry a
// decoded command across a boundary: into the wasip1 build
// (lp_step_command), and from the Workers front to its workspace's object,
// whose log keeps it as it came. A 56-byte header, then the strings:
//
//	op u8 (0 none, 1 acquire, 2 release, 3 wait, 4 tick, 5 suspend,
//	6 resume, 7 forget, 8 cancel), flags u8 (bit 0 leaseId present,
//	bit 1 askId present, bit 2 waitUpToMs present), 2 zero bytes,
//	limit u32, nowMs i64, waitUpToMs i64, then the byte lengths (u32 each)
//	of resource, actorDid, mode, leaseId, prefix, after, askId and
//	invalid (Command.Invalid), then those bytes in that order.
//
// Every integer is little-endian. nowMs is at RecordNowOffset, so a host
// that owns the clock stamps it there.
const (
	RecordHeader    = 56
	RecordNowOffset = 8
)

// recordOps are the op codes of the record, from 1.
var recordOps = [...]Op{OpAcquire, OpRelease, OpWait, OpTick, OpSuspend, OpResume, OpForget, OpCancel}

const errRecordOp = "op must be one of acquire, release, wait, tick, suspend, resume, forget, cancel"

// recordCode is c's op code, and c with Invalid naming the ops when its
// op has none: such a command travels as op none, answered invalid_request.
func recordCode(c Command) (byte, Command) {
	for i, op := range recordOps {
		if c.Op == op {
			return byte(i + 1), c
		}
	}
	if c.Op != "" && c.Invalid == "" {
		c.Invalid = errRecordOp
	}
	return 0, c
}

// RecordLen is the length of c's record.
func RecordLen(c Command) int {
	_, c = recordCode(c)
	return RecordHeader + len(c.Resource) + len(c.ActorDid) + len(c.Mode) + len(c.LeaseID) + len(c.Prefix) +
		len(c.After) + len(c.AskID) + len(c.Invalid)
}

// PutRecord lays c out in buf, which holds RecordLen(c) bytes.
func PutRecord(buf []byte, c Command) {
	code, c := recordCode(c)
	le := binary.LittleEndian
	buf[0], buf[1], buf[2], buf[3] = code, 0, 0, 0
	for i, f := range [...]bool{c.HasLeaseID, c.HasAskID, c.HasWaitUpTo} {
		if f {
			buf[1] |= 1 << i
		}
	}
	le.PutUint32(buf[4:], uint32(c.Limit))
	le.PutUint64(buf[RecordNowOffset:], uint64(c.NowMs))
	le.PutUint64(buf[16:], uint64(c.WaitUpToMs))
	at := RecordHeader
	for i, f := range [...]string{c.Resource, c.ActorDid, c.Mode, c.LeaseID, c.Prefix, c.After, c.AskID, c.Invalid} {
		le.PutUint32(buf[24+4*i:], uint32(len(f)))
		at += copy(buf[at:], f)
	}
}

// AppendRecord appends c's record to b.
func AppendRecord(b []byte, c Command) []byte {
	n := len(b)
	b = append(b, make([]byte, RecordLen(c))...)
	PutRecord(b[n:], c)
	return b
}

// ParseRecord reads a command record. The error is the host's mistake (a
// record that is not one), never a client's: a client's bad command
// travels in Invalid.
func ParseRecord(b []byte) (Command, error) {
	if len(b) < RecordHeader {
		return Command{}, errors.New("a command record needs 56 bytes")
	}
	le := binary.LittleEndian
	var c Command
	if code := int(b[0]); code > len(recordOps) {
		return Command{}, errors.New("unknown op code in a command record")
	} else if code > 0 {
		c.Op = recordOps[code-1]
	}
	c.HasLeaseID, c.HasAskID, c.HasWaitUpTo = b[1]&1 != 0, b[1]&2 != 0, b[1]&4 != 0
	c.Limit = int(le.Uint32(b[4:]))
	c.NowMs = int64(le.Uint64(b[RecordNowOffset:]))
	c.WaitUpToMs = int64(le.Uint64(b[16:]))
	rest := b[RecordHeader:]
	for i, f := range [...]*string{&c.Resource, &c.ActorDid, &c.Mode, &c.LeaseID, &c.Prefix, &c.After, &c.AskID, &c.Invalid} {
		l := le.Uint32(b[24+4*i:])
		if uint64(l) > uint64(len(rest)) {
			return Command{}, errors.New("field lengths beyond the command record")
		}
		if l > 0 {
			*f = string(rest[:l])
		}
		rest = rest[l:]
	}
	return c, nil
}
