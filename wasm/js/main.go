//go:build js && wasm

// Command js is the kernel built for browsers and Node (GOOS=js
// GOARCH=wasm). Loaded with Go's wasm_exec.js, it installs
// globalThis.leaseplane:
//
//	replay(scenarioJson: string) -> string
//	    the transcript, byte for byte what `leaseplane replay` prints
//	    (kernel/scenario.Replay through kernel.Native, the same code); an
//	    invalid scenario throws an Error with kernel/scenario's message.
//	version() -> {kernel: string, build: string}
//	    the kernel's semantic version and a short hash of the sources this
//	    file was built from (set by `make wasm`).
//	newMachine(rulesJson: string) -> Machine      (throws on invalid rules)
//	    a live kernel for stepping one command at a time (the playground).
//
// A Machine has step(stepJson) -> string ({"answer":...,"events":[...]},
// the same bytes as kernel.Result's Answer and Events), trust() -> string,
// snapshot() -> string, nextAlarm() -> number|null and close(). After
// close every method throws. There is no restore from a snapshot here: no
// page needs one, since a page can replay its steps.
//
// Go functions cannot throw into JavaScript, so each throwing method is a
// Go function that returns either its result or an {error: message}
// object, wrapped by leaseplaneGlue.throwing from web/static/glue.js (load
// it before running the module) into one that throws new Error(message)
// for the latter. The wrapper is a script file of its own, not made at run
// time with the Function constructor, so that pages run under a strict
// Content-Security-Policy (no 'unsafe-eval') and in Cloudflare Workers,
// which forbid eval. Without glue.js the methods return the error object.
package main

import (
	"syscall/js"

	"github.com/leaseplane/leaseplane/wasm/internal/jsarg"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// build is the short source hash; make wasm sets it with -ldflags -X.
var build string

// closedMethod replaces a closed machine's methods: it throws.
var closedMethod js.Value

// throwing turns a Go function that returns a value or {error: msg} into a
// JavaScript function that returns the value or throws Error(msg); it is
// leaseplaneGlue.throwing (glue.js), or undefined without it.
var throwing js.Value

func main() {
	if glue := js.Global().Get("leaseplaneGlue"); glue.Type() == js.TypeObject {
		throwing = glue.Get("throwing")
	} else {
		js.Global().Get("console").Call("error", "leaseplane: glue.js was not loaded: methods return {__leaseplaneError} instead of throwing")
	}
	closedMethod = wrap(func([]js.Value) any { return errValue("leaseplane: machine is closed") })
	api := js.Global().Get("Object").New()
	api.Set("replay", wrap(func(args []js.Value) any {
		in, err := jsarg.String(args, 0, "replay(scenarioJson)")
		if err != nil {
			return errValue(err.Error())
		}
		out, err := scenario.Replay(kernel.Native, []byte(in))
		if err != nil {
			return errValue(err.Error())
		}
		return string(out)
	}))
	api.Set("version", js.FuncOf(func(js.Value, []js.Value) any {
		return map[string]any{"kernel": kernel.Version, "build": buildHash()}
	}))
	api.Set("newMachine", wrap(func(args []js.Value) any {
		rules := ""
		if len(args) > 0 && args[0].Type() != js.TypeUndefined && args[0].Type() != js.TypeNull {
			s, err := jsarg.String(args, 0, "newMachine(rulesJson)")
			if err != nil {
				return errValue(err.Error())
			}
			rules = s
		}
		e, err := kernel.Native.New([]byte(rules))
		if err != nil {
			return errValue("newMachine: " + err.Error())
		}
		return machineObject(e)
	}))
	js.Global().Set("leaseplane", api)
	select {}
}

// machineObject exposes one engine to JavaScript.
func machineObject(e kernel.Engine) js.Value {
	obj := js.Global().Get("Object").New()
	var funcs []js.Func
	var names []string
	closed := false
	method := func(name string, f func(args []js.Value) any) {
		fn := js.FuncOf(func(_ js.Value, args []js.Value) any {
			if closed {
				return errValue(name + ": machine is closed")
			}
			return f(args)
		})
		funcs = append(funcs, fn)
		names = append(names, name)
		obj.Set(name, throwingFunc(fn))
	}
	method("step", func(args []js.Value) any {
		s, err := jsarg.String(args, 0, "step(stepJson)")
		if err != nil {
			return errValue(err.Error())
		}
		res, err := e.Step(kernel.DecodeStepCommand([]byte(s)))
		if err != nil {
			return errValue("step: " + err.Error())
		}
		out := scenario.AppendReady([]byte{'{'}, res)
		return string(append(out, '}'))
	})
	method("trust", func([]js.Value) any {
		b, err := e.Trust()
		if err != nil {
			return errValue("trust: " + err.Error())
		}
		return string(b)
	})
	method("snapshot", func([]js.Value) any {
		b, err := e.Snapshot()
		if err != nil {
			return errValue("snapshot: " + err.Error())
		}
		return string(b)
	})
	method("nextAlarm", func([]js.Value) any {
		at, ok, err := e.NextAlarm()
		if err != nil {
			return errValue("nextAlarm: " + err.Error())
		}
		if !ok {
			return nil
		}
		return float64(at)
	})
	method("close", func([]js.Value) any {
		closed = true
		err := e.Close()
		// Release the Go side of every method and put a JavaScript
		// function that throws in its place, so a closed machine holds no
		// Go memory and a late call throws instead of returning undefined.
		for _, name := range names {
			obj.Set(name, closedMethod)
		}
		for _, fn := range funcs {
			fn.Release()
		}
		if err != nil {
			return errValue("close: " + err.Error())
		}
		return nil
	})
	return obj
}

func wrap(f func(args []js.Value) any) js.Value {
	return throwingFunc(js.FuncOf(func(_ js.Value, args []js.Value) any { return f(args) }))
}

// throwingFunc wraps fn with the glue's throwing, when there is glue.
func throwingFunc(fn js.Func) js.Value {
	if throwing.Type() != js.TypeFunction {
		return fn.Value
	}
	return throwing.Invoke(fn)
}

func errValue(msg string) any { return map[string]any{"__leaseplaneError": msg} }

func buildHash() string {
	if build != "" {
		return build
	}
	return "dev"
}
