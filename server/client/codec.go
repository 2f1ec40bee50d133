package client

import (
	"bytes"
	"unicode/utf8"

	"github.com/leaseplane/leaseplane/kernel"
)

// The request bodies are written by hand, without reflection, in one
// allocation each. Strings are escaped as the kernel escapes them
// (kernel.AppendQuote): the same values as encoding/json's bytes, which
// also escape <, > and & (TestEncodeLikeEncodingJSON).

// appendAcquire appends r as acquire's JSON body.
func appendAcquire(b []byte, r AcquireRequest) []byte {
	b = append(b, `{"resource":`...)
	b = kernel.AppendQuote(b, r.Resource)
	b = append(b, `,"actorDid":`...)
	b = kernel.AppendQuote(b, r.ActorDid)
	if r.Mode != "" {
		b = append(b, `,"mode":`...)
		b = kernel.AppendQuote(b, r.Mode)
	}
	return append(b, '}')
}

// appendRelease appends r as release's JSON body.
func appendRelease(b []byte, r ReleaseRequest) []byte {
	b = append(b, `{"resource":`...)
	b = kernel.AppendQuote(b, r.Resource)
	b = append(b, `,"actorDid":`...)
	b = kernel.AppendQuote(b, r.ActorDid)
	if r.LeaseID != "" {
		b = append(b, `,"leaseId":`...)
		b = kernel.AppendQuote(b, r.LeaseID)
	}
	return append(b, '}')
}

// bodySize is room for a body of these strings when none needs escaping:
// the member names, quotes and punctuation of the longest body, and the
// strings.
func bodySize(a, b, c string) int { return 48 + len(a) + len(b) + len(c) }

func encodeAcquire(r AcquireRequest) []byte {
	return appendAcquire(make([]byte, 0, bodySize(r.Resource, r.ActorDid, r.Mode)), r)
}

func encodeRelease(r ReleaseRequest) []byte {
	return appendRelease(make([]byte, 0, bodySize(r.Resource, r.ActorDid, r.LeaseID)), r)
}

// decodeAnswerFast decodes the JSON object b into a, which must be zero,
// in one pass and without reflection, when b is an answer as the plane
// words it: each member one of Answer's (its JSON name exactly, once),
// strings without escapes, integers without fraction or exponent, no
// nulls. It reports false for anything else, leaving a in any state: the
// caller then decodes b with encoding/json, which gives what this would
// have (FuzzDecodeAnswer compares them). The strings are cut from one copy
// of b.
func decodeAnswerFast(b []byte, a *Answer) bool {
	d := answerDecoder{b: b}
	ok := d.object(func(name []byte) bool {
		switch string(name) {
		case "ok":
			return d.once(0) && d.bool(&a.OK)
		case "reason":
			return d.once(1) && d.string(&a.Reason)
		case "error":
			return d.once(2) && d.string(&a.Error)
		case "lease":
			if !d.once(3) {
				return false
			}
			a.Lease = &Lease{}
			return d.lease(a.Lease)
		case "holder":
			return d.once(4) && d.string(&a.Holder)
		case "holders":
			return d.once(5) && d.strings(&a.Holders)
		case "claimants":
			return d.once(6) && d.strings(&a.Claimants)
		case "stampede":
			if !d.once(7) {
				return false
			}
			a.Stampede = &Stampede{}
			return d.stampede(a.Stampede)
		case "waitingOn":
			return d.once(8) && d.string(&a.WaitingOn)
		case "cycle":
			return d.once(9) && d.strings(&a.Cycle)
		case "released":
			return d.once(10) && d.bool(&a.Released)
		case "releasedIds":
			return d.once(11) && d.strings(&a.ReleasedIDs)
		case "leaseId":
			return d.once(12) && d.string(&a.LeaseID)
		}
		return false
	})
	d.space()
	return ok && d.i == len(b)
}

// answerDecoder reads one answer; seen has a bit per member met, each
// object its own range of bits (the answer's 0-15, the lease's 16-23, the
// stampede's 24-25).
type answerDecoder struct {
	b    []byte
	i    int
	s    string // b as a string, once a string is read
	seen uint32
}

func (d *answerDecoder) once(bit uint) bool {
	if d.seen&(1<<bit) != 0 {
		return false
	}
	d.seen |= 1 << bit
	return true
}

func (d *answerDecoder) lease(l *Lease) bool {
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "id":
			return d.once(16) && d.string(&l.ID)
		case "resource":
			return d.once(17) && d.string(&l.Resource)
		case "holder":
			return d.once(18) && d.string(&l.Holder)
		case "mode":
			return d.once(19) && d.string(&l.Mode)
		case "fence":
			return d.once(20) && d.int(&l.Fence)
		case "grantedAtMs":
			return d.once(21) && d.int(&l.GrantedAtMs)
		case "expiresAtMs":
			return d.once(22) && d.int(&l.ExpiresAtMs)
		}
		return false
	})
}

func (d *answerDecoder) stampede(s *Stampede) bool {
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "admitted":
			return d.once(24) && d.strings(&s.Admitted)
		case "waitMs":
			return d.once(25) && d.int(&s.WaitMs)
		}
		return false
	})
}

func (d *answerDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c, passing
// it if so.
func (d *answerDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling member with each member's name with the
// reader on its value; member reads the value.
func (d *answerDecoder) object(member func(name []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		start, end, ok := d.raw()
		if !ok || !d.next(':') || !member(d.b[start:end]) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// raw reads a string without escapes or control characters, valid UTF-8,
// and gives its bounds within the quotes.
func (d *answerDecoder) raw() (start, end int, ok bool) {
	if !d.next('"') {
		return 0, 0, false
	}
	start = d.i
	ascii := true
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			end = d.i
			d.i++
			return start, end, ascii || utf8.Valid(d.b[start:end])
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, 0, false
}

func (d *answerDecoder) string(s *string) bool {
	start, end, ok := d.raw()
	if !ok {
		return false
	}
	if d.s == "" {
		d.s = string(d.b)
	}
	*s = d.s[start:end]
	return true
}

// strings reads an array of strings; an empty one is an empty slice, not
// nil, as encoding/json decodes it.
func (d *answerDecoder) strings(ss *[]string) bool {
	if !d.next('[') {
		return false
	}
	*ss = []string{}
	if d.next(']') {
		return true
	}
	for {
		var s string
		if !d.string(&s) {
			return false
		}
		*ss = append(*ss, s)
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

func (d *answerDecoder) bool(v *bool) bool {
	d.space()
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		*v, d.i = true, d.i+4
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		*v, d.i = false, d.i+5
	default:
		return false
	}
	return d.delimited()
}

// int reads an integer as JSON writes one: an optional minus, then 0 or
// digits not starting with 0, no fraction or exponent, within int64.
func (d *answerDecoder) int(v *int64) bool {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	// 18 digits or fewer cannot overflow; longer ones are left to
	// encoding/json.
	if n := d.i - digits; n == 0 || n > 18 || n > 1 && d.b[digits] == '0' || !d.delimited() {
		return false
	}
	var n int64
	for _, c := range d.b[digits:d.i] {
		n = n*10 + int64(c-'0')
	}
	if digits > start {
		n = -n
	}
	*v = n
	return true
}

// delimited reports whether a number or literal ends where the reader is:
// at the end, or before white space, ',', '}' or ']'.
func (d *answerDecoder) delimited() bool {
	if d.i == len(d.b) {
		return true
	}
	switch d.b[d.i] {
	case ' ', '\t', '\n', '\r', ',', '}', ']':
		return true
	}
	return false
}
