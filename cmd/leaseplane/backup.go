package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/backup"
)

const backupSummary = `Copies the data folder DIR into OUT, a new folder, while leaseplane serve
runs on it and goes on granting: each SQLite file is copied by VACUUM INTO
(one read transaction, which never blocks the writer), in an order that keeps
them consistent with each other (the ledger, the events and the snapshots are
never ahead of the command log they come from), then the ledger signing keys
(mode 0600), then OUT/backup.json with every file's SHA-256. OUT holds signing
keys and key hashes: keep it as you keep the data folder.`

func runBackup(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("backup", "usage: leaseplane backup [--data DIR] OUT\n"+backupSummary, stderr)
	data := fs.String("data", "./data", "the data folder `DIR` to copy (serve may be running on it)")
	pos, code, ok := parsePositional(fs, args, 1, "one OUT folder")
	if !ok {
		return code
	}
	start := time.Now()
	m, err := backup.Take(context.Background(), *data, pos[0], time.Now)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane %v\n", err) // "backup: ..."
		return 1
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	fmt.Fprintf(stdout, "backup of %s in %s: %d files, %d bytes, taken at %s, in %s\n", *data, pos[0], len(m.Files), size,
		time.UnixMilli(m.TakenAtMs).UTC().Format(time.RFC3339Nano), time.Since(start).Round(time.Millisecond))
	return exitOK
}

const restoreSummary = `Puts the backup BACKUP into the data folder DIR, which must be empty or
missing (--force replaces a data folder there; never one a running serve
holds). Every file is checked against BACKUP/backup.json and SQLite's
integrity check. The lost plane must stay stopped; start the restored one
no sooner than 30 s after the lost one stopped answering (the leases it
granted after the backup have lapsed by then).

Fences: the lost plane went on granting after the backup, and a fence must
never be handed out twice. On its first start each workspace's fence counter
is raised, once, by 1000 for every millisecond since the backup was taken
(far more than a plane can grant) plus 1,000,000, and to at least
--fence-floor. The raise trusts this machine's clock; when in doubt, pass the
highest fence your downstream systems saw as --fence-floor.

Ledger: the entries the lost plane appended after the backup are gone, and
what the restored plane appends next forks any checkpoint it signed beyond
the backup. Pass the newest checkpoints you kept (--checkpoint FILE, any
number; the file a 'leaseplane ledger watch --file' keeps will do): restore
refuses when one is beyond what the backup's ledger reaches, unless
--accept-ledger-fork.`

// stringList is a flag that may be given many times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// readCheckpoint reads a signed checkpoint from a file: the note itself
// (as GET /api/v1/ledger/checkpoint answers it), or a file that
// `leaseplane ledger watch` keeps, whose last checkpoint it takes.
func readCheckpoint(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return b, nil
	}
	var last string
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r watchRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("line %d is not a line of a ledger watch file: %v", i+1, err)
		}
		if r.Checkpoint != "" {
			last = r.Checkpoint
		}
	}
	if last == "" {
		return nil, errors.New("the ledger watch file holds no checkpoint yet")
	}
	return []byte(last), nil
}

func runRestore(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("restore", "usage: leaseplane restore [--data DIR] [--force] [--fence-floor N] [--checkpoint FILE]... [--accept-ledger-fork] BACKUP\n"+
		restoreSummary, stderr)
	data := fs.String("data", "./data", "the data folder `DIR` to restore into (empty or missing)")
	force := fs.Bool("force", false, "replace the data folder in DIR")
	floor := fs.Int64("fence-floor", 0, "every workspace's next fence is above `N`")
	var checkpoints stringList
	fs.Var(&checkpoints, "checkpoint", "a `FILE` holding a signed checkpoint the lost plane published, or a ledger watch file (may be repeated)")
	fork := fs.Bool("accept-ledger-fork", false, "restore even when a checkpoint is beyond the backup's ledger")
	pos, code, ok := parsePositional(fs, args, 1, "one BACKUP folder")
	if !ok {
		return code
	}
	if *floor < 0 || *floor > server.MaxFence {
		fmt.Fprintf(stderr, "leaseplane restore: --fence-floor must be from 0 to %d\n", int64(server.MaxFence))
		return exitUsage
	}
	opts := backup.Options{Force: *force, FenceFloor: *floor, AcceptLedgerFork: *fork, Now: time.Now}
	for _, f := range checkpoints {
		b, err := readCheckpoint(f)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane restore: --checkpoint %s: %v\n", f, err)
			return exitUsage
		}
		opts.Checkpoints = append(opts.Checkpoints, b)
	}
	if server.DataDirInUse(*data) {
		fmt.Fprintf(stderr, "leaseplane restore: a running leaseplane serve holds %s; stop it first\n", *data)
		return 1
	}
	rep, err := backup.Restore(context.Background(), pos[0], *data, opts)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane %v\n", err) // "restore: ..."
		return 1
	}
	fmt.Fprintf(stdout, "restored %s (taken %s, %s ago) into %s\n", pos[0],
		time.UnixMilli(rep.Manifest.TakenAtMs).UTC().Format(time.RFC3339), (time.Duration(rep.ElapsedMs) * time.Millisecond).Round(time.Second), *data)
	fmt.Fprintf(stdout, "fences: on its first start each workspace's fence counter rises by %d", rep.Raise.Raise)
	if rep.Raise.Floor > 0 {
		fmt.Fprintf(stdout, ", and to at least %d", rep.Raise.Floor)
	}
	fmt.Fprintln(stdout)
	for _, w := range rep.Workspaces {
		fmt.Fprintf(stdout, "workspace %s: log to command %d; ledger reaches %d entries once caught up", w.Name, w.LastSeq, w.LedgerSize)
		if len(w.Checked) > 0 {
			fmt.Fprintf(stdout, "; checkpoints %v match", w.Checked)
		}
		if len(w.Forked) > 0 {
			fmt.Fprintf(stdout, "; FORKED: checkpoints %v were signed after the backup (accepted)", w.Forked)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "keys revoked and agents suspended after the backup are valid and free again: revoke and suspend them again (leaseplane keys list --data %s)\n", *data)
	if len(checkpoints) == 0 {
		fmt.Fprintln(stdout, "no --checkpoint given: a checkpoint the lost plane signed beyond these sizes forks from what this plane signs next (docs/SERVER.md)")
	}
	return exitOK
}
