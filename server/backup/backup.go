// Package backup takes online backups of a lease plane's data folder and
// restores them (docs/SERVER.md, "Backup and restore").
//
// # Taking a backup
//
// Take copies the four SQLite files of a data folder (leaseplane.db,
// snapshots.db, ledger.db, events.db) and the workspaces' ledger signing
// keys into a new folder, while `leaseplane serve` runs on it and goes on
// granting: each database is copied with SQLite's VACUUM INTO, one read
// transaction of that file, which in WAL mode never blocks the writer
// (server/store CopyDatabases). The files are copied in an order that keeps
// them consistent with each other, what is derived from the command log
// before the log, with log trimming held meanwhile, so the copied ledger
// is never ahead of the copied log, no snapshot is newer than the log's
// last command, and every log row a copied snapshot or ledger still needs
// is in the copied log. The keys are copied last: a workspace in the
// copied database has its key in the backup whenever it had one. A
// manifest (backup.json) written last, with each file's size and SHA-256,
// marks the backup complete; the folder appears under its name only then.
//
// # Restoring
//
// Restore checks the manifest and every file, copies them into an empty
// data folder, checks SQLite's integrity, and records the fence raise
// (store.SetFenceRaise) that the server applies to each workspace on its
// first load. The plane kept running after the backup and handed out
// fences the backup does not know, so the raise is derived from the time
// since the backup was taken: RatePerMs fences for every millisecond, far
// more than one workspace can grant (its commands are applied one at a
// time; the whole plane tops out near 7 grants per millisecond,
// docs/BENCHMARKS.md), plus Margin, which also covers a restoring machine
// whose clock is behind the lost one's by up to Margin/RatePerMs ms. An
// operator who knows better (the highest fence a downstream system saw)
// raises it further with a floor.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// ManifestName is the manifest's file in a backup folder.
const ManifestName = "backup.json"

// Format is the version of the backup folder's layout.
const Format = 1

// RatePerMs bounds the fences one workspace can hand out per millisecond
// of wall time; Margin is added to every raise.
const (
	RatePerMs = 1000
	Margin    = 1_000_000
)

// Manifest describes a backup.
type Manifest struct {
	Format int `json:"format"`
	// TakenAtMs is the wall clock, in Unix ms, when the backup began:
	// every fence handed out after it is unknown to the backup.
	TakenAtMs int64  `json:"takenAtMs"`
	Files     []File `json:"files"`
}

// File is one file of a backup, by its path inside the folder.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Take writes a backup of the data folder dataDir into out, a folder that
// must not exist yet. now is the wall clock.
func Take(ctx context.Context, dataDir, out string, now func() time.Time) (Manifest, error) {
	if _, err := os.Stat(filepath.Join(dataDir, store.FileName)); err != nil {
		return Manifest{}, fmt.Errorf("backup: %s is not a leaseplane data folder (no %s): %w", dataDir, store.FileName, err)
	}
	if _, err := os.Lstat(out); err == nil {
		return Manifest{}, fmt.Errorf("backup: %s exists; a backup goes into a new folder", out)
	}
	parent := filepath.Dir(filepath.Clean(out))
	removePartials(parent)
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+partialInfix)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: make a folder beside %s: %w", out, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := writeNew(filepath.Join(tmp, partialMark), strings.NewReader(strconv.Itoa(os.Getpid()))); err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	m := Manifest{Format: Format, TakenAtMs: now().UnixMilli()}
	st, err := store.Open(dataDir, store.Options{})
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	err = st.CopyDatabases(ctx, tmp)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	if err := copyKeys(filepath.Join(dataDir, ledger.KeyDir), filepath.Join(tmp, ledger.KeyDir)); err != nil {
		return Manifest{}, err
	}
	if m.Files, err = listFiles(tmp); err != nil {
		return Manifest{}, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: write the manifest: %w", err)
	}
	if err := writeNew(filepath.Join(tmp, ManifestName), bytes.NewReader(append(b, '\n'))); err != nil {
		return Manifest{}, fmt.Errorf("backup: write the manifest: %w", err)
	}
	if err := os.Remove(filepath.Join(tmp, partialMark)); err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	syncDir(tmp)
	if err := os.Rename(tmp, out); err != nil {
		return Manifest{}, fmt.Errorf("backup: name the backup %s: %w", out, err)
	}
	done = true
	syncDir(parent)
	return m, nil
}

// A backup is written into a hidden folder beside its destination,
// ".OUT.partial-N", holding partialMark (the writing process's id) until
// it is complete and renamed. A backup killed on the way leaves it, with
// copies of the key hashes and signing keys: the next backup or restore
// beside it removes it.
const (
	partialInfix = ".partial-"
	partialMark  = ".leaseplane-partial"
)

// removePartials removes the partial backup folders in dir that no live
// process is still writing.
func removePartials(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".") || !strings.Contains(e.Name(), partialInfix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(p, partialMark))
		if err != nil {
			continue // not one of ours, or not ours to judge
		}
		if pid, err := strconv.Atoi(string(b)); err == nil && pid != os.Getpid() && alive(pid) {
			continue // another backup is writing it now
		}
		os.RemoveAll(p)
	}
}

// copyKeys copies the signing keys (mode 0600, in a folder of mode 0700).
func copyKeys(from, to string) error {
	ents, err := os.ReadDir(from)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no workspace has a ledger key yet
	}
	if err != nil {
		return fmt.Errorf("backup: read %s: %w", from, err)
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".key") {
			continue // a key being written (.new-key-*), or not a key
		}
		if err := copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return fmt.Errorf("backup: copy the signing key %s: %w", e.Name(), err)
		}
	}
	syncDir(to)
	return nil
}

// listFiles lists the files of a backup folder with their sizes and
// hashes, in name order.
func listFiles(dir string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == partialMark {
			return nil // removed before the rename
		}
		size, sum, err := hashFile(path)
		if err != nil {
			return err
		}
		out = append(out, File{Name: filepath.ToSlash(rel), Size: size, SHA256: sum})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("backup: list %s: %w", dir, err)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies a file into a new one of mode 0600, synced.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeNew(to, in)
}

// writeNew writes what r reads into a new file of mode 0600 at path, and
// syncs it before it returns.
func writeNew(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// ReadManifest reads and checks a backup folder: its manifest, and every
// file it names, by size and SHA-256; a file it does not name is refused
// too.
func ReadManifest(dir string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: %s is not a complete backup (no %s): %w", dir, ManifestName, err)
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("restore: %s does not read: %w", ManifestName, err)
	}
	if m.Format != Format {
		return Manifest{}, fmt.Errorf("restore: backup format %d; this build reads format %d", m.Format, Format)
	}
	if m.TakenAtMs <= 0 {
		return Manifest{}, fmt.Errorf("restore: %s has no takenAtMs", ManifestName)
	}
	got, err := listFiles(dir)
	if err != nil {
		return Manifest{}, err
	}
	got = slices.DeleteFunc(got, func(f File) bool { return f.Name == ManifestName })
	want := map[string]File{}
	for _, f := range m.Files {
		want[f.Name] = f
	}
	for _, name := range store.BackupOrder {
		if _, ok := want[name]; !ok {
			return Manifest{}, fmt.Errorf("restore: the backup's manifest lists no %s", name)
		}
	}
	for _, f := range got {
		w, ok := want[f.Name]
		switch {
		case !ok:
			return Manifest{}, fmt.Errorf("restore: %s is in the backup folder but not in its manifest", f.Name)
		case w.Size != f.Size || w.SHA256 != f.SHA256:
			return Manifest{}, fmt.Errorf("restore: %s is damaged: %d bytes with SHA-256 %s, the manifest says %d bytes with %s",
				f.Name, f.Size, f.SHA256, w.Size, w.SHA256)
		}
		delete(want, f.Name)
	}
	for name := range want {
		return Manifest{}, fmt.Errorf("restore: %s, in the backup's manifest, is missing", name)
	}
	return m, nil
}

// Options tune a restore.
type Options struct {
	// Force restores into a folder that already holds a data folder's
	// files, replacing them (never one a running server holds: the caller
	// checks).
	Force bool
	// FenceFloor, when above 0, is a fence every workspace's next fence is
	// above (the highest one a downstream system saw, say).
	FenceFloor int64
	// Checkpoints are signed checkpoints the lost plane published (fetched
	// by clients, monitors or `leaseplane ledger watch`). A restore whose
	// ledger cannot reach one of them (it was signed after the backup) is
	// refused unless AcceptLedgerFork.
	Checkpoints [][]byte
	// AcceptLedgerFork restores anyway when a checkpoint is beyond the
	// backup: that ledger forks, and its verifiers will see it.
	AcceptLedgerFork bool
	// Now is the wall clock.
	Now func() time.Time
}

// Report says what a restore did.
type Report struct {
	Manifest   Manifest
	ElapsedMs  int64 // since the backup was taken, by this machine's clock
	Raise      store.FenceRaise
	Workspaces []Workspace
}

// Workspace is a restored workspace's ledger.
type Workspace struct {
	Name string
	// LastSeq is the last command of its log in the backup.
	LastSeq int64
	// LedgerSize is its ledger's size once it has caught up with the
	// restored log: every checkpoint the lost plane signed up to that size
	// is a checkpoint of the restored tree, and none beyond it is.
	LedgerSize int64
	// Checked lists the sizes of the checkpoints shown (Options) that were
	// found in the restored ledger, byte for byte.
	Checked []int64
	// Forked lists the sizes of the checkpoints shown that the restored
	// ledger cannot reach (accepted with AcceptLedgerFork).
	Forked []int64
}

// dataFiles are the names of a data folder's files that a restore writes
// or, with Force, replaces.
func isDataFile(name string) bool {
	if name == ledger.KeyDir || name == "serve.lock" {
		return true
	}
	for _, db := range store.BackupOrder {
		if name == db || name == db+"-wal" || name == db+"-shm" || name == db+"-journal" {
			return true
		}
	}
	return false
}

// Restore puts the backup in dir into the data folder dataDir, which must
// be empty or missing (or hold only a data folder's files, with Force).
func Restore(ctx context.Context, dir, dataDir string, opts Options) (Report, error) {
	removePartials(filepath.Dir(filepath.Clean(dir)))
	m, err := ReadManifest(dir)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Manifest: m}
	if opts.Now == nil {
		return rep, errors.New("restore: Options.Now is required")
	}
	rep.ElapsedMs = opts.Now().UnixMilli() - m.TakenAtMs
	if rep.ElapsedMs < 0 {
		if opts.FenceFloor <= 0 {
			return rep, fmt.Errorf("restore: this machine's clock reads %s, before the backup was taken (%s): the fences the lost plane handed out since cannot be bounded; set the clock, or pass a fence floor above every fence it handed out",
				opts.Now().UTC().Format(time.RFC3339), time.UnixMilli(m.TakenAtMs).UTC().Format(time.RFC3339))
		}
		rep.ElapsedMs = 0
	}
	if opts.FenceFloor < 0 {
		return rep, errors.New("restore: the fence floor is negative")
	}
	rep.Raise = store.FenceRaise{Raise: rep.ElapsedMs*RatePerMs + Margin, Floor: opts.FenceFloor}
	if err := prepare(dataDir, opts.Force); err != nil {
		return rep, err
	}
	var written []string
	fail := func(err error) (Report, error) {
		for _, p := range slices.Backward(written) {
			os.RemoveAll(p)
		}
		return rep, err
	}
	for _, f := range m.Files {
		to := filepath.Join(dataDir, filepath.FromSlash(f.Name))
		if d := filepath.Dir(to); d != filepath.Clean(dataDir) {
			if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fail(fmt.Errorf("restore: %w", err))
			} else if err == nil {
				written = append(written, d)
			}
		}
		if err := copyFile(filepath.Join(dir, filepath.FromSlash(f.Name)), to); err != nil {
			return fail(fmt.Errorf("restore: copy %s: %w", f.Name, err))
		}
		written = append(written, to)
	}
	syncDir(dataDir)
	st, err := store.Open(dataDir, store.Options{})
	if err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	err = st.CheckIntegrity(ctx)
	if err == nil {
		rep.Workspaces, err = checkLedgers(ctx, st, dataDir, opts)
	}
	if err == nil {
		rep.Raise, err = st.SetFenceRaise(rep.Raise)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	return rep, nil
}

// prepare makes sure dataDir can take a restore.
func prepare(dataDir string, force bool) error {
	ents, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return fmt.Errorf("restore: create %s: %w", dataDir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore: read %s: %w", dataDir, err)
	}
	if len(ents) == 0 {
		return nil
	}
	var names, others []string
	for _, e := range ents {
		names = append(names, e.Name())
		if !isDataFile(e.Name()) {
			others = append(others, e.Name())
		}
	}
	if !force {
		return fmt.Errorf("restore: the data folder %s is not empty (%s); restore into an empty folder, or pass --force to replace the data folder there",
			dataDir, strings.Join(names, ", "))
	}
	if len(others) > 0 {
		return fmt.Errorf("restore: %s holds files that are not a data folder's (%s); even with --force a restore replaces only a data folder",
			dataDir, strings.Join(others, ", "))
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dataDir, n)); err != nil {
			return fmt.Errorf("restore: remove %s: %w", n, err)
		}
	}
	return nil
}

// checkLedgers works out, for each restored workspace, the size its ledger
// reaches once it has caught up with the restored log, and checks the
// checkpoints shown against it.
func checkLedgers(ctx context.Context, st *store.Store, dataDir string, opts Options) ([]Workspace, error) {
	wss, err := st.Workspaces()
	if err != nil {
		return nil, err
	}
	type known struct {
		ws       *Workspace
		id       int64
		verifier string
	}
	var out []Workspace
	var ids []int64
	for _, w := range wss {
		if store.IsDrillWorkspace(w.Name) {
			continue
		}
		pos, _, err := st.LedgerPos(ctx, w.ID)
		if err != nil {
			return nil, err
		}
		r := Workspace{Name: w.Name, LedgerSize: pos.Size}
		for after := pos.Seq; ; {
			rows, err := st.LogEvents(ctx, w.ID, after, 4096)
			if err != nil {
				return nil, err
			}
			if len(rows) == 0 {
				break
			}
			for _, row := range rows {
				if len(row.Events) > 0 {
					evs, err := kernel.ParseEvents(row.Events)
					if err != nil {
						return nil, fmt.Errorf("workspace %s: the events of command %d do not read: %w", w.Name, row.Seq, err)
					}
					r.LedgerSize += int64(len(evs))
				}
			}
			after = rows[len(rows)-1].Seq
		}
		if r.LastSeq, err = st.LastSeq(ctx, w.ID); err != nil {
			return nil, err
		}
		out = append(out, r)
		ids = append(ids, w.ID)
	}
	byOrigin := map[string]known{}
	for i := range out {
		if v, err := ledger.VerifierKey(dataDir, out[i].Name); err == nil {
			byOrigin[v[:strings.IndexByte(v, '+')]] = known{ws: &out[i], id: ids[i], verifier: v}
		}
	}
	for _, signed := range opts.Checkpoints {
		origin, _, _ := strings.Cut(string(signed), "\n")
		k, ok := byOrigin[origin]
		if !ok {
			return nil, fmt.Errorf("a checkpoint names the origin %q, which no restored workspace's signing key has", origin)
		}
		c, err := kledger.Open(signed, k.verifier)
		if err != nil {
			return nil, fmt.Errorf("a checkpoint of %s: %w", origin, err)
		}
		if c.Size > k.ws.LedgerSize {
			if !opts.AcceptLedgerFork {
				return nil, fmt.Errorf("workspace %s: the lost plane signed a checkpoint of size %d, and this backup's ledger reaches only %d entries: the entries between were lost with it, and what the restored plane appends would fork the published tree; restore from a newer backup, or pass --accept-ledger-fork (docs/SERVER.md says what it means)",
					k.ws.Name, c.Size, k.ws.LedgerSize)
			}
			k.ws.Forked = append(k.ws.Forked, c.Size)
			continue
		}
		note, ok, err := st.CheckpointAt(ctx, k.id, c.Size)
		if err != nil {
			return nil, err
		}
		if ok {
			if string(note) != string(signed) {
				return nil, fmt.Errorf("workspace %s: the checkpoint of size %d shown differs from the one this backup's ledger signed: the backup is not of the plane that published it",
					k.ws.Name, c.Size)
			}
			k.ws.Checked = append(k.ws.Checked, c.Size)
		}
	}
	return out, nil
}
