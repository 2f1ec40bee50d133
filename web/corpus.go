package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
)

//go:embed corpus/*.json
var corpusFS embed.FS

// Example is one scenario of the corpus, as the examples menu shows it.
type Example struct {
	Name        string // file name without .json, e.g. breaking-a-deadlock
	Title       string
	Description string
	Reference   bool   // one of the four reference examples
	JSON        string // the scenario file as written
}

// ReferenceExamples are the four examples every page leads with, in order.
var ReferenceExamples = []string{"two-release-agents", "crashed-holder", "breaking-a-deadlock", "thundering-herd"}

var (
	corpusOnce sync.Once
	corpus     []Example
	corpusErr  error
)

// Corpus returns the embedded scenarios: the reference examples first in
// their order, then the rest by title.
func Corpus() ([]Example, error) {
	corpusOnce.Do(func() { corpus, corpusErr = loadCorpus(corpusFS, "corpus") })
	return corpus, corpusErr
}

func loadCorpus(fsys fs.FS, dir string) ([]Example, error) {
	names, err := fs.Glob(fsys, dir+"/*.json")
	if err != nil {
		return nil, err
	}
	rank := map[string]int{}
	for i, n := range ReferenceExamples {
		rank[n] = i + 1
	}
	var out []Example
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("web: corpus %s: %w", n, err)
		}
		var head struct {
			Title       string `json:"title"`
			Description string `json:"description"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return nil, fmt.Errorf("web: corpus %s is not a JSON object: %w", n, err)
		}
		name := strings.TrimSuffix(path.Base(n), ".json")
		if head.Title == "" {
			head.Title = strings.ReplaceAll(name, "-", " ")
			head.Title = strings.ToUpper(head.Title[:1]) + head.Title[1:]
		}
		out = append(out, Example{Name: name, Title: head.Title, Description: head.Description, Reference: rank[name] > 0, JSON: string(b)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank[out[i].Name], rank[out[j].Name]
		switch {
		case ri > 0 && rj > 0:
			return ri < rj
		case ri > 0 || rj > 0:
			return ri > 0
		}
		return out[i].Title < out[j].Title
	})
	for _, r := range ReferenceExamples {
		if rank[r] > 0 && !has(out, r) {
			return nil, fmt.Errorf("web: the corpus lacks the reference example %s.json (run make generate)", r)
		}
	}
	return out, nil
}

func has(ex []Example, name string) bool {
	for _, e := range ex {
		if e.Name == name {
			return true
		}
	}
	return false
}

// ExampleByName finds a corpus scenario.
func ExampleByName(name string) (Example, bool) {
	ex, err := Corpus()
	if err != nil {
		return Example{}, false
	}
	for _, e := range ex {
		if e.Name == name {
			return e, true
		}
	}
	return Example{}, false
}
