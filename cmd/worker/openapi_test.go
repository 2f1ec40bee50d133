package main

import (
	"bytes"
	"os"
	"testing"
)

// TestOpenAPIIsTheServers: the document the front answers is the
// contract's file, the one the server answers, byte for byte.
func TestOpenAPIIsTheServers(t *testing.T) {
	file, err := os.ReadFile("../../kernel/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if rep, allow := openapi("GET"); rep.status != 200 || allow != "" || !bytes.Equal(rep.body, file) {
		t.Errorf("GET: %d, Allow %q, %d bytes: want 200 and kernel/api/openapi.json's %d bytes", rep.status, allow, len(rep.body), len(file))
	}
	if rep, allow := openapi("POST"); rep.status != 405 || allow != "GET" {
		t.Errorf("POST: %d, Allow %q", rep.status, allow)
	}
}
