// Command corpusgen copies the scenario corpus (SRC/*.json) into DST so
// that package web can embed it: go:embed cannot reach outside the
// package directory. Files in DST that are no longer in SRC are removed.
//
// Usage: go run ./internal/corpusgen SRC DST
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: corpusgen SRC DST")
		os.Exit(2)
	}
	if err := copyCorpus(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "corpusgen:", err)
		os.Exit(1)
	}
}

func copyCorpus(src, dst string) error {
	names, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("no scenarios in %s", src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, filepath.Base(n))
		keep[filepath.Base(n)] = true
		if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
	}
	olds, err := filepath.Glob(filepath.Join(dst, "*.json"))
	if err != nil {
		return err
	}
	for _, o := range olds {
		if !keep[filepath.Base(o)] {
			if err := os.Remove(o); err != nil {
				return err
			}
		}
	}
	return nil
}
