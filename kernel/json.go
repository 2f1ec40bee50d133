package kernel

import (
	"errors"

	"github.com/leaseplane/leaseplane/kernel/internal/jsontext"
)

// The kernel reads and writes JSON with kernel/internal/jsontext alone.
// These exports give the packages around it (the server, the Workers tier,
// the browser build, the ledger's bundles) the same codec, so no host needs
// encoding/json, whose reflection costs the browser build size and the
// wasm builds time.

// Kind is the kind of a JSON value; its String names it as an error
// message does ("an object").
type Kind = jsontext.Kind

// The kinds of JSON values.
const (
	KindInvalid = jsontext.Invalid // not the start of a JSON value
	KindNull    = jsontext.Null
	KindBool    = jsontext.Bool
	KindNumber  = jsontext.Number
	KindString  = jsontext.String
	KindArray   = jsontext.Array
	KindObject  = jsontext.Object
)

// KindOf is the kind of the JSON value raw starts with.
func KindOf(raw []byte) Kind { return jsontext.KindOf(raw) }

// ScanObject reads doc, which must be exactly one JSON object, and calls f
// with each member's name and raw value bytes, in order. Malformed JSON and
// duplicate names are errors; so is an error from f, which stops the scan.
func ScanObject(doc []byte, f func(name string, raw []byte) error) error {
	return scanObject(doc, jsontext.Options{}, f)
}

// ScanMembers is ScanObject that passes duplicated names on to f instead
// of refusing them.
func ScanMembers(doc []byte, f func(name string, raw []byte) error) error {
	return scanObject(doc, jsontext.Options{Duplicates: true}, f)
}

func scanObject(doc []byte, o jsontext.Options, f func(name string, raw []byte) error) error {
	return jsontext.ReadObject(doc, o, func(name []byte, v jsontext.Value) error { return f(string(name), v.Raw) })
}

// StringMembers reads doc, which must be exactly one JSON object, and
// gives the values of its string members named a and b ("" for one that
// is absent or not a string; of a name given twice, the last).
func StringMembers(doc []byte, a, b string) (va, vb string, err error) {
	err = ScanMembers(doc, func(name string, raw []byte) error {
		switch name {
		case a:
			va, _ = Unquote(raw)
		case b:
			vb, _ = Unquote(raw)
		}
		return nil
	})
	return va, vb, err
}

// ScanArray reads raw, which must be exactly one JSON array, and calls f
// with each element's raw bytes, in order.
func ScanArray(raw []byte, f func(elem []byte) error) error {
	return jsontext.ReadArray(raw, func(v jsontext.Value) error { return f(v.Raw) })
}

// Unquote decodes raw, which must be exactly one JSON string.
func Unquote(raw []byte) (string, error) { return jsontext.Unquote(raw) }

// AppendCompact appends raw, a valid JSON value, without the white space
// between tokens. Strings are copied as written.
func AppendCompact(dst, raw []byte) []byte { return jsontext.Compact(dst, raw) }

// AppendQuote appends s as a JSON string, escaped as every kernel answer
// escapes strings.
func AppendQuote(dst []byte, s string) []byte { return jsontext.AppendString(dst, s) }

// IntLiteral reads raw as an integer literal (no fraction, no exponent,
// within ±2^53), the way the kernel reads atMs: "-0" is 0.
func IntLiteral(raw []byte) (int64, bool) { return jsontext.Int(raw) }

// ParseEvents reads a JSON array of events as AppendEvents writes it, for
// an engine that gets them as bytes (the wasip1 build). Each Event's JSON
// aliases arr.
func ParseEvents(arr []byte) ([]Event, error) {
	var events []Event
	err := jsontext.ReadArray(arr, func(v jsontext.Value) error {
		e := Event{JSON: v.Raw}
		var hasType, hasAt bool
		err := jsontext.ReadObject(v.Raw, jsontext.Options{}, func(name []byte, f jsontext.Value) error {
			var err error
			switch string(name) {
			case "type":
				e.Type, err = jsontext.Unquote(f.Raw)
				hasType = err == nil
			case "atMs":
				e.AtMs, hasAt = jsontext.Int(f.Raw)
			}
			return err
		})
		if err == nil && (!hasType || !hasAt) {
			err = errors.New("an event needs a string type and an integer atMs")
		}
		events = append(events, e)
		return err
	})
	if err != nil {
		return nil, errors.New("events: " + err.Error())
	}
	return events, nil
}
