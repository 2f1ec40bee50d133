package client

import "github.com/leaseplane/leaseplane/kernel"

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
