package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/web"
)

// mountWeb serves web.Handler (the playground, the docs and their static
// files, / sent to the playground) at / beside the API: the server's own
// routes are more specific, so they win.
func mountWeb(s *server.Server, _ mountOptions) error {
	s.Handle("/", web.Handler())
	return nil
}

func runSite(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("site", "usage: leaseplane site OUTDIR\n       leaseplane site --listen ADDR", stderr)
	listen := fs.String("listen", "", "serve the pages (no API) on this address instead of writing files, e.g. 127.0.0.1:18083")
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if *listen != "" && fs.NArg() == 0 {
		return previewSite(*listen, stdout, stderr)
	}
	if *listen != "" || fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	dir := fs.Arg(0)
	if err := web.WriteSite(dir); err != nil {
		fmt.Fprintf(stderr, "leaseplane site: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "leaseplane site: wrote %s (open playground/index.html through any static file server)\n", dir)
	return 0
}

// previewSite serves web.Handler until the process ends; it prints the
// address first, so a test can listen on port 0.
func previewSite(addr string, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane site: listen on %s: %v\n", addr, err)
		return 1
	}
	fmt.Fprintf(stdout, "leaseplane site: serving the pages on http://%s/playground\n", ln.Addr())
	if err := http.Serve(ln, web.Handler()); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "leaseplane site: %v\n", err)
		return 1
	}
	return 0
}
