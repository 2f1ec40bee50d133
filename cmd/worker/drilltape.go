package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/detect"
	"github.com/leaseplane/leaseplane/kernel/drill"
)

// The drills run here, in the front, by kernel/drill (the server's own
// code): drills.go is the host; this file reads what a drill workspace's
// object answers (drills.mjs) and the drill routes' bodies.

// parseTape reads a drill workspace's tape as its object answers it: a
// JSON array of {op, nowMs, body (base64), status, answer, events,
// changed}, answer and events as the kernel wrote them.
func parseTape(b []byte) ([]drill.TapeEntry, error) {
	var out []drill.TapeEntry
	err := kernel.ScanArray(b, func(elem []byte) error {
		var te drill.TapeEntry
		err := kernel.ScanObject(elem, func(name string, raw []byte) error {
			var err error
			switch name {
			case "op":
				var s string
				s, err = kernel.Unquote(raw)
				te.Op = kernel.Op(s)
			case "nowMs":
				te.NowMs, err = integer(raw)
			case "body":
				te.Body, err = base64Field(raw)
			case "status":
				var n int64
				n, err = integer(raw)
				te.Status = int(n)
			case "answer":
				te.Answer = append([]byte(nil), raw...)
			case "events":
				te.Events = append([]byte(nil), raw...)
			case "changed":
				te.Changed = string(raw) == "true"
			}
			return err
		})
		out = append(out, te)
		return err
	})
	if err != nil {
		return nil, errors.New("the drill workspace's tape: " + err.Error())
	}
	return out, nil
}

// parseLog reads a drill workspace's log as its object answers it: a JSON
// array of {op, nowMs, body (base64)}, read as tape entries. The object's
// log keeps no status.
func parseLog(b []byte) ([]drill.Record, error) {
	tape, err := parseTape(b)
	if err != nil {
		return nil, errors.New("the drill workspace's log: " + strings.TrimPrefix(err.Error(), "the drill workspace's tape: "))
	}
	out := make([]drill.Record, len(tape))
	for i, te := range tape {
		out[i] = drill.Record{Op: string(te.Op), NowMs: te.NowMs, Body: te.Body}
	}
	return out, nil
}

func integer(raw []byte) (int64, error) {
	n, ok := kernel.IntLiteral(raw)
	if !ok {
		return 0, errors.New("not an integer: " + string(raw))
	}
	return n, nil
}

func base64Field(raw []byte) ([]byte, error) {
	s, err := kernel.Unquote(raw)
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(s)
}

// emptyBody checks the body of POST /api/v1/drills/run: nothing, or {}.
func emptyBody(body []byte) error {
	if strings.TrimSpace(string(body)) == "" {
		return nil
	}
	return kernel.ScanObject(body, func(name string, _ []byte) error {
		return errors.New("unknown field " + strconv.Quote(name))
	})
}

// stringField reads body, a JSON object with no member but field, a
// string: its value (nil when absent), or what is wrong.
func stringField(body []byte, field string) (*string, error) {
	var v *string
	err := kernel.ScanObject(body, func(name string, raw []byte) error {
		if name != field {
			return errors.New("unknown field " + strconv.Quote(name))
		}
		s, err := kernel.Unquote(raw)
		if err != nil {
			return errors.New(field + " must be a string")
		}
		v = &s
		return nil
	})
	return v, err
}

// cancelID reads the run of POST /api/v1/drills/cancel's body
// {"id": "run_N"}: N, or the refusal's message.
func cancelID(body []byte) (int64, string) {
	id, err := stringField(body, "id")
	if err != nil {
		return 0, "the body must be a JSON object: " + err.Error() + ` (POST ` + api.PathDrillsCancel + ` takes {"id": "run_N"})`
	}
	if id == nil {
		return 0, `id is required: the run to cancel, "run_N" as POST ` + api.PathDrillsRun + ` answered it`
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(*id, "run_"), 10, 64)
	if err != nil || !strings.HasPrefix(*id, "run_") || n <= 0 {
		return 0, "id must be a run's id, run_N (N from 1), as POST " + api.PathDrillsRun + " answered it; got " + strconv.Quote(*id)
	}
	return n, ""
}

// drillsLimit reads GET /api/v1/drills/runs's limit (20 when absent).
func drillsLimit(q api.Query) (int, string) {
	v, ok := q.Get("limit")
	if !ok {
		return 20, ""
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, "limit must be an integer from 1 to 1000"
	}
	return n, ""
}

// detectorOf reads POST /api/v1/detection/run's body {"detector": NAME}:
// the name, or the refusal's message.
func detectorOf(body []byte) (string, string) {
	name, err := stringField(body, "detector")
	if err != nil {
		return "", "the body must be a JSON object: " + err.Error() + ` (POST ` + api.PathDetectionRun + ` takes {"detector": NAME})`
	}
	if name == nil {
		return "", "detector is required (the detectors: GET " + api.PathDetectors + ")"
	}
	return *name, ""
}

// checkpointSize is the tree size of a signed checkpoint note (its second
// line).
func checkpointSize(note []byte) (int64, error) {
	lines := strings.SplitN(string(note), "\n", 3)
	if len(lines) < 3 {
		return 0, errors.New("the ledger's checkpoint is not a note")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("the ledger's checkpoint has no tree size")
	}
	return n, nil
}

// parseEntries reads GET /api/v1/ledger/entries's answer: the entries'
// indexes and bodies.
func parseEntries(b []byte) ([]detect.Entry, error) {
	var out []detect.Entry
	err := kernel.ScanObject(b, func(name string, raw []byte) error {
		if name != "entries" {
			return nil
		}
		return kernel.ScanArray(raw, func(elem []byte) error {
			var e detect.Entry
			err := kernel.ScanObject(elem, func(name string, raw []byte) error {
				var err error
				switch name {
				case "index":
					e.Index, err = integer(raw)
				case "data":
					e.Data, err = base64Field(raw)
				}
				return err
			})
			out = append(out, e)
			return err
		})
	})
	if err != nil {
		return nil, errors.New("the ledger's entries: " + err.Error())
	}
	return out, nil
}

// caseIDs reads the object's answer to filing n findings: {"ids": [N...]}.
func caseIDs(b []byte, n int) ([]int64, error) {
	var ids []int64
	err := kernel.ScanObject(b, func(name string, raw []byte) error {
		if name != "ids" {
			return nil
		}
		return kernel.ScanArray(raw, func(elem []byte) error {
			id, err := integer(elem)
			ids = append(ids, id)
			return err
		})
	})
	if err == nil && len(ids) != n {
		err = errors.New(strconv.Itoa(len(ids)) + " case ids for " + strconv.Itoa(n) + " findings")
	}
	return ids, err
}

// intMember is the integer member name of the JSON object b, if it has one.
func intMember(b []byte, name string) (int64, bool) {
	var n int64
	found := false
	kernel.ScanObject(b, func(member string, raw []byte) error {
		if member == name {
			n, found = kernel.IntLiteral(raw)
		}
		return nil
	})
	return n, found
}

// The cadence's bounds, as on the server: 0 (none) or 1 s to 7 days.
const (
	minCadenceMs = 1000
	maxCadenceMs = 7 * 24 * 3600 * 1000
)

// cadenceEvery reads PUT /api/v1/drills/cadence's body {"everyMs": N}: N,
// or the refusal's message (the server's).
func cadenceEvery(body []byte) (int64, string) {
	var raw []byte
	if strings.TrimSpace(string(body)) != "" {
		err := kernel.ScanObject(body, func(name string, v []byte) error {
			if name != "everyMs" {
				return errors.New("unknown field " + strconv.Quote(name))
			}
			raw = v
			return nil
		})
		if err != nil {
			return 0, "the body must be a JSON object: " + err.Error() + ` (PUT ` + api.PathDrillsCadence + ` takes {"everyMs": N})`
		}
	}
	if raw == nil || string(raw) == "null" {
		return 0, "everyMs is required: the milliseconds between runs, or 0 to stop"
	}
	every, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || (every != 0 && (every < minCadenceMs || every > maxCadenceMs)) {
		return 0, "everyMs must be 0 (stop) or an integer from " + strconv.Itoa(minCadenceMs) + " to " + strconv.Itoa(maxCadenceMs)
	}
	return every, ""
}

// runnerProof is the proof a workspace's object sends with a runner token
// (drills.mjs makes the same): the hex HMAC-SHA256, under the ledger
// secret, of "leaseplane drill runner", the workspace and the token, lines
// apart. Only the object and the front know the secret.
func runnerProof(secret, workspace, token string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("leaseplane drill runner\n" + workspace + "\n" + token))
	return hex.EncodeToString(m.Sum(nil))
}
