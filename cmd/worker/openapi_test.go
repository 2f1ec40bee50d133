package main

import (
	"bytes"
	"os"
	"testing"
)

// TestOpenAPIIsTheServers: the document the front answers is the server's
// file, byte for byte (cp server/openapi.json cmd/worker/openapi.json).
func TestOpenAPIIsTheServers(t *testing.T) {
	server, err := os.ReadFile("../../server/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(openAPI, server) {
		t.Error("cmd/worker/openapi.json is not server/openapi.json: cp server/openapi.json cmd/worker/openapi.json")
	}
	if rep, allow := openapi("POST"); rep.status != 405 || allow != "GET" {
		t.Errorf("POST: %d, Allow %q", rep.status, allow)
	}
}
