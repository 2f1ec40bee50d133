//go:build js && wasm

// Command ledgerjs is the signed ledger's verification and sealing
// (kernel/ledger, the same code as `leaseplane verify`) built for browsers
// (GOOS=js GOARCH=wasm). It is a WebAssembly module of its own, apart from
// the browser kernel: x/mod's note and tlog bring fmt and reflection, which
// would take the kernel's build past its size budget, so only the pages
// that check or seal a ledger load it (web/static/ledger.js). It installs
// globalThis.leaseplaneLedger:
//
//	verify(text, verifierKey) -> {ok: true, value: summary} | {ok: false, error}
//	    checks a receipt or a bundle offline; the error names the first
//	    thing that does not hold.
//	newKey(origin, seed) -> {ok: true, value: {signer, verifier}}
//	    the Ed25519 signing key named origin made from seed, 32 random bytes
//	    (a Uint8Array the page draws with crypto.getRandomValues: this
//	    module imports no random source of its own, which keeps it smaller).
//	seal(signerKey, transcriptJson) -> {ok: true, value: json}
//	    makes a ledger of a replay's events (every step's events, in order,
//	    each entry's bytes exactly as the kernel wrote them in the
//	    transcript), signs its checkpoint and returns, as JSON text,
//	    {"checkpoint": note, "verifier": key, "entries": [{"step": i,
//	    "receipt": text}...], "bundle": text}.
//
// Nothing here touches the network.
package main

import (
	"bytes"
	"strconv"
	"syscall/js"

	"github.com/leaseplane/leaseplane/wasm/internal/jsarg"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/ledger"
)

func main() {
	js.Global().Set("leaseplaneLedger", ledgerAPI())
	select {}
}

func okValue(v any) any       { return map[string]any{"ok": true, "value": v} }
func errValue(msg string) any { return map[string]any{"ok": false, "error": msg} }

func wrap(f func(args []js.Value) any) js.Func {
	return js.FuncOf(func(_ js.Value, args []js.Value) any { return f(args) })
}

// twoStrings is a function of two string arguments; sig names it in the
// error when they are not strings.
func twoStrings(sig string, f func(a, b string) any) js.Func {
	return wrap(func(args []js.Value) any {
		a, err := jsarg.String(args, 0, sig)
		if err != nil {
			return errValue(err.Error())
		}
		b, err := jsarg.String(args, 1, sig)
		if err != nil {
			return errValue(err.Error())
		}
		return f(a, b)
	})
}

// ledgerAPI is globalThis.leaseplaneLedger (see the package doc).
func ledgerAPI() js.Value {
	api := js.Global().Get("Object").New()
	api.Set("verify", twoStrings("verify(text, verifierKey)", func(text, key string) any {
		v, err := ledger.Verify([]byte(text), trimSpace(key))
		if err != nil {
			return errValue(err.Error())
		}
		return okValue(v.Summary())
	}))
	api.Set("newKey", wrap(func(args []js.Value) any {
		origin, err := jsarg.String(args, 0, "newKey(origin)")
		if err != nil {
			return errValue(err.Error())
		}
		if len(args) < 2 || args[1].Type() != js.TypeObject || args[1].Get("length").Int() != 32 {
			return errValue("newKey(origin, seed): seed must be 32 random bytes (a Uint8Array)")
		}
		seed := make([]byte, 32)
		js.CopyBytesToGo(seed, args[1])
		s, v, err := ledger.GenerateKey(bytes.NewReader(seed), origin)
		if err != nil {
			return errValue("newKey: " + err.Error())
		}
		return okValue(map[string]any{"signer": s, "verifier": v})
	}))
	api.Set("seal", twoStrings("seal(signerKey, transcriptJson)", func(signer, events string) any {
		out, err := seal(trimSpace(signer), []byte(events))
		if err != nil {
			return errValue("seal: " + err.Error())
		}
		return okValue(string(out))
	}))
	return api
}

// seal makes and signs the ledger of a transcript's events.
func seal(signer string, transcript []byte) ([]byte, error) {
	verifier, err := ledger.VerifierOf(signer)
	if err != nil {
		return nil, err
	}
	var t ledger.Tree
	var steps []int
	err = kernel.ScanMembers(transcript, func(name string, raw []byte) error {
		if name != "steps" {
			return nil
		}
		i := 0
		return kernel.ScanArray(raw, func(step []byte) error {
			defer func() { i++ }()
			return kernel.ScanMembers(step, func(name string, raw []byte) error {
				if name != "events" {
					return nil
				}
				return kernel.ScanArray(raw, func(ev []byte) error {
					steps = append(steps, i)
					_, err := t.Append(ev)
					return err
				})
			})
		})
	})
	if err != nil {
		return nil, err
	}
	origin := verifier[:indexByte(verifier, '+')]
	c, err := t.Checkpoint(origin, t.Size())
	if err != nil {
		return nil, err
	}
	note, err := ledger.Sign(c, signer)
	if err != nil {
		return nil, err
	}
	out := []byte(`{"checkpoint":`)
	out = kernel.AppendQuote(out, string(note))
	out = append(out, `,"verifier":`...)
	out = kernel.AppendQuote(out, verifier)
	out = append(out, `,"entries":[`...)
	for i := int64(0); i < t.Size(); i++ {
		r, err := t.Receipt(i, note, t.Size())
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"step":`...)
		out = strconv.AppendInt(out, int64(steps[i]), 10)
		out = append(out, `,"receipt":`...)
		out = kernel.AppendQuote(out, string(r.Marshal()))
		out = append(out, '}')
	}
	out = append(out, `],"bundle":`...)
	out = kernel.AppendQuote(out, string(t.Bundle(note).Marshal()))
	return append(out, '}'), nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\r' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n' || s[len(s)-1] == '\r' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
