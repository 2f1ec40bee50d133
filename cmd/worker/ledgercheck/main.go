// Command ledgercheck checks what the Workers tier's ledger routes answered
// with kernel/ledger, offline: the worker's ledger test
// (cmd/worker/test/ledger.test.mjs) writes them to a file and runs
//
//	go run ./cmd/worker/ledgercheck FILE
//
// FILE is JSON: {"verifier", "origin", "entries": [base64...], "checkpoints":
// [signed note...], "receipts": [{"leaseId", "text"}...], "consistency":
// [{"from", "to", "hashes": [base64...]}...]}. It checks that every
// checkpoint opens with the verifier and names the origin, that the entries
// (the whole ledger, from index 0) hash to each checkpoint's root, that
// every receipt verifies and holds the entry at its index, and that every
// consistency proof leads from one checkpoint's root to another's. It exits
// 0 with a summary, or 1 naming the first thing that does not hold.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel/ledger"
)

type input struct {
	Verifier    string   `json:"verifier"`
	Origin      string   `json:"origin"`
	Entries     []string `json:"entries"`
	Checkpoints []string `json:"checkpoints"`
	Receipts    []struct {
		LeaseID string `json:"leaseId"`
		Text    string `json:"text"`
	} `json:"receipts"`
	Consistency []struct {
		From   int64    `json:"from"`
		To     int64    `json:"to"`
		Hashes []string `json:"hashes"`
	} `json:"consistency"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ledgercheck FILE")
		os.Exit(2)
	}
	summary, err := check(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgercheck:", err)
		os.Exit(1)
	}
	fmt.Println(summary)
}

func check(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var in input
	if err := json.Unmarshal(b, &in); err != nil {
		return "", fmt.Errorf("%s: %v", file, err)
	}
	var tree ledger.Tree
	for i, e := range in.Entries {
		data, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return "", fmt.Errorf("entry %d: %v", i, err)
		}
		if _, err := tree.Append(data); err != nil {
			return "", err
		}
	}
	roots := map[int64]ledger.Hash{}
	for i, text := range in.Checkpoints {
		c, err := ledger.Open([]byte(text), in.Verifier)
		if err != nil {
			return "", fmt.Errorf("checkpoint %d: %v", i, err)
		}
		if c.Origin != in.Origin {
			return "", fmt.Errorf("checkpoint %d: origin %q, want %q", i, c.Origin, in.Origin)
		}
		root, err := tree.Root(c.Size)
		if err != nil {
			return "", fmt.Errorf("checkpoint %d of size %d: %v", i, c.Size, err)
		}
		if root != c.Root {
			return "", fmt.Errorf("checkpoint %d: the entries of the first %d hash to %s, the checkpoint says %s", i, c.Size, root, c.Root)
		}
		roots[c.Size] = c.Root
	}
	for _, r := range in.Receipts {
		rc, c, err := ledger.VerifyReceipt([]byte(r.Text), in.Verifier)
		if err != nil {
			return "", fmt.Errorf("receipt of %s: %v", r.LeaseID, err)
		}
		if rc.Index >= tree.Size() || string(tree.Entry(rc.Index)) != string(rc.Entry) {
			return "", fmt.Errorf("receipt of %s: entry %d differs from the ledger's", r.LeaseID, rc.Index)
		}
		var ev struct {
			Type    string `json:"type"`
			LeaseID string `json:"leaseId"`
		}
		if err := json.Unmarshal(rc.Entry, &ev); err != nil || ev.Type != "coordination.lease" || ev.LeaseID != r.LeaseID {
			return "", fmt.Errorf("receipt of %s: its entry is not that lease's grant: %s", r.LeaseID, rc.Entry)
		}
		if c.Origin != in.Origin {
			return "", fmt.Errorf("receipt of %s: origin %q", r.LeaseID, c.Origin)
		}
	}
	for _, p := range in.Consistency {
		from, ok1 := roots[p.From]
		to, ok2 := roots[p.To]
		if !ok1 || !ok2 {
			return "", fmt.Errorf("consistency %d→%d: no checkpoint of each size", p.From, p.To)
		}
		hs := make([]ledger.Hash, len(p.Hashes))
		for i, h := range p.Hashes {
			x, err := ledger.ParseHash(h)
			if err != nil {
				return "", fmt.Errorf("consistency %d→%d: hash %d: %v", p.From, p.To, i, err)
			}
			hs[i] = x
		}
		if err := ledger.CheckConsistency(hs, p.To, to, p.From, from); err != nil {
			return "", fmt.Errorf("consistency %d→%d: %v", p.From, p.To, err)
		}
	}
	if len(in.Checkpoints) == 0 {
		return "", errors.New("no checkpoint to check")
	}
	return "ledgercheck: " + strconv.Itoa(len(in.Entries)) + " entries, " + strconv.Itoa(len(in.Checkpoints)) +
		" checkpoints, " + strconv.Itoa(len(in.Receipts)) + " receipts and " + strconv.Itoa(len(in.Consistency)) +
		" consistency proofs hold under " + in.Verifier, nil
}
