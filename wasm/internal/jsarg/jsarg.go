//go:build js && wasm

// Package jsarg reads the arguments that JavaScript passes to the Go
// functions of the GOOS=js builds (wasm/js, wasm/ledgerjs), with one
// message for a missing or mistyped one.
package jsarg

import "syscall/js"

// String is args[i] as a string; sig names the function in the error,
// such as "replay(scenarioJson)".
func String(args []js.Value, i int, sig string) (string, error) {
	if len(args) <= i || args[i].Type() != js.TypeString {
		return "", argError(sig + ": argument " + string(rune('1'+i)) + " must be a string")
	}
	return args[i].String(), nil
}

type argError string

func (e argError) Error() string { return string(e) }
