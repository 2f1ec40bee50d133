//go:build js && wasm

package main

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/detect"
)

// Detection on the Workers tier: kernel/detect's detectors, run by the
// front over the workspace's ledger as its object serves it (the ledger
// routes: checkpoint, entries, proof), its findings filed as cases by
// the object, the run answered as the server answers it.

const pathDetection = "/api/v1/detection/"

// detectionRoutes are the detection routes of the contract the front
// answers.
var detectionRoutes = []api.Route{api.DetectionRun, api.DetectionCases, api.Detectors}

func detection(r *http.Request, rt api.Route) reply {
	k, q, body, rep, ok := keyed(r, rt)
	if !ok {
		return rep
	}
	switch rt.Path {
	case api.PathDetectors:
		// The object says whether it still holds the key (a revocation).
		if rep := toObject(k.workspace, "/keyed/whoami", nil, k.id); rep.status != 200 {
			return rep
		}
		return reply{status: 200, body: detect.ListJSON()}
	case api.PathDetectionCases:
		status, _ := q.Get("status")
		if status != "" && status != "open" {
			return refusal(400, kernel.ReasonInvalid, `status must be "open" or absent (every case)`)
		}
		return toObject(k.workspace, "/keyed/detection/cases?status="+status, nil, k.id)
	}
	name, msg := detectorOf(body)
	if msg != "" {
		return refusal(400, kernel.ReasonInvalid, msg)
	}
	d, found := detect.Lookup(name)
	if !found {
		return refusal(400, kernel.ReasonInvalid, "detector "+strconv.Quote(name)+" is not registered (the detectors: GET "+api.PathDetectors+")")
	}
	out, err := runDetector(k, d)
	if err != nil {
		return unavailable(err.Error())
	}
	return reply{status: 200, body: out}
}

// runDetector runs d over k's workspace's ledger up to the checkpoint it
// signs for the run, files the findings as cases, and answers the run:
// each finding with its case and both entries, each with its inclusion
// proof against that checkpoint.
func runDetector(k keyRecord, d detect.Detector) ([]byte, error) {
	get := func(path string) ([]byte, error) {
		rep := toObject(k.workspace, path, nil, k.id)
		if rep.status != 200 {
			return nil, errors.New(path + " answered " + strconv.Itoa(rep.status) + ": " + string(rep.body))
		}
		return rep.body, nil
	}
	note, err := get("/ledger/checkpoint")
	if err != nil {
		return nil, err
	}
	size, err := checkpointSize(note)
	if err != nil {
		return nil, err
	}
	rb, err := get("/keyed/detection/rules")
	if err != nil {
		return nil, err
	}
	rules, err := kernel.ParseRules(rb)
	if err != nil {
		return nil, err
	}
	var entries []detect.Entry
	for start := int64(0); start < size; {
		b, err := get("/ledger/entries?start=" + strconv.FormatInt(start, 10) + "&count=" + strconv.FormatInt(min(1000, size-start), 10))
		if err != nil {
			return nil, err
		}
		es, err := parseEntries(b)
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			return nil, errors.New("the ledger's entries from " + strconv.FormatInt(start, 10) + " are gone")
		}
		entries = append(entries, es...)
		start += int64(len(es))
	}
	fs, err := d.Run(entries, detect.OptionsFor(rules))
	if err != nil {
		return nil, err
	}
	cases := []byte{'['}
	for i, f := range fs {
		if i > 0 {
			cases = append(cases, ',')
		}
		cases = kernel.AppendQuote(append(cases, '['), f.Key())
		cases = strconv.AppendInt(append(cases, ','), f.A.Entry, 10)
		cases = strconv.AppendInt(append(cases, ','), f.B.Entry, 10)
		cases = append(f.AppendJSON(append(cases, ',')), ']')
	}
	rep := toObject(k.workspace, "/keyed/detection/file?detector="+d.Name, append(cases, ']'), k.id)
	if rep.status != 200 {
		return nil, errors.New("filing the cases: " + string(rep.body))
	}
	ids, err := caseIDs(rep.body, len(fs))
	if err != nil {
		return nil, err
	}
	now, _ := intMember(rep.body, "nowMs") // the object's clock, which filed the cases
	b := append([]byte(nil), `{"ok":true,"detector":`...)
	b = kernel.AppendQuote(b, d.Name)
	b = kernel.AppendQuote(append(b, `,"checkpoint":`...), string(note))
	b = strconv.AppendInt(append(b, `,"treeSize":`...), size, 10)
	b = append(b, `,"findings":[`...)
	for i, f := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		fj := f.AppendJSON(nil)
		b = append(b, fj[:len(fj)-1]...) // the finding's members, then the case and the entries
		b = strconv.AppendInt(append(b, `,"case":"case_`...), ids[i], 10)
		b = append(b, `","entries":[`...)
		for j, idx := range []int64{f.A.Entry, f.B.Entry} {
			proof, err := get("/ledger/proof?index=" + strconv.FormatInt(idx, 10) + "&size=" + strconv.FormatInt(size, 10))
			if err != nil {
				return nil, err
			}
			data := entries[idx-entries[0].Index].Data
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(append(b, `{"index":`...), idx, 10)
			b = base64.StdEncoding.AppendEncode(append(b, `,"data":"`...), data)
			b = append(append(b, `","event":`...), data...)
			b = append(append(append(b, `,"proof":`...), proof...), '}')
		}
		b = append(b, "]}"...)
	}
	// The run's entry in the workspace's ledger, as the server records it;
	// as there, a run whose entry is not written is still answered.
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = "case_" + strconv.FormatInt(id, 10)
	}
	toObject(k.workspace, "/keyed/detection/record", detect.RunEvent(now, d.Name, size, len(fs), names), k.id)
	return append(b, "]}"...), nil
}
