package web

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html"
	"io"

	"github.com/a-h/templ"
)

// headBoot is the page's one inline script, the first in its head: it
// starts the kernel's fetch and streaming compile as the head is parsed,
// makes window.lpKernel, and inserts BootFile (Go's wasm_exec.js, glue.js
// and boot.js), async, which starts Go in the module once both are there.
// Inline, it waits for no request of its own and does not hold the
// parser, so the stylesheet and the deferred scripts are asked for at
// once. Its element names the module (data-wasm) and BootFile (data-boot).
//
//go:embed headboot.js
var headBoot string

// headBootHash is headBoot's hash as the Content-Security-Policy names it.
var headBootHash = func() string {
	sum := sha256.Sum256([]byte(headBoot))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}()

func headBootScript(wasm, boot string) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<script data-wasm="`+html.EscapeString(wasm)+`" data-boot="`+html.EscapeString(boot)+`">`+headBoot+`</script>`)
		return err
	})
}
