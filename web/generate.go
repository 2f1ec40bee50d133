package web

//go:generate go tool templ generate -log-level warn
//go:generate go run ./internal/corpusgen ../kernel/testdata/scenarios corpus
