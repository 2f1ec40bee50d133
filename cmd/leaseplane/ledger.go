package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/client"
	sledger "github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

const ledgerHelp = `usage: leaseplane ledger VERB [FLAGS]

  key    --data DIR --workspace W     print the workspace's verifier key (made with the workspace)
  export --url URL [--out FILE]       write the workspace's ledger as a bundle (key: LEASEPLANE_KEY); once
         [--no-mark]                  written, tell the plane (serve --ledger-retention may then drop the
                                      entries' bodies after its period; their hashes stay)
  watch  --url URL --file FILE        append each new checkpoint to FILE after checking that it is
         [--every 10s] [--once]       signed by the workspace's key and consistent with the last one
  status --data DIR --workspace W     print the ledger's entries, the bytes they keep on disk, the oldest
                                      body kept and the export mark (a running server may hold DIR)

A bundle or receipt is checked offline with: leaseplane verify --key VKEY FILE`

func runLedger(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSubverb("ledger", ledgerHelp, map[string]subverb{"key": ledgerKey, "export": ledgerExport, "watch": ledgerWatch, "status": ledgerStatus},
		args, stdout, stderr)
}

func ledgerFlags(verb, usage string, stderr io.Writer) *flag.FlagSet {
	return newFlags("ledger "+verb, "usage: leaseplane ledger "+usage, stderr)
}

func ledgerKey(args []string, stdout, stderr io.Writer) int {
	fs := ledgerFlags("key", "key --data DIR --workspace W", stderr)
	data := fs.String("data", "./data", "the plane's data folder")
	ws := fs.String("workspace", "default", "the workspace")
	host := fs.String("public-host", "", "the host name to put in front of the origin, if the key is made now")
	if st, ok := parseCount(fs, args, 0); !ok {
		return st
	}
	if v, err := sledger.VerifierKey(*data, *ws); err == nil {
		fmt.Fprintln(stdout, v)
		return exitOK
	}
	// No key yet: the workspace must exist; its key is made now, as the
	// server would on its first load.
	if !haveData("ledger key", *data, stderr) {
		return exitRefused
	}
	st, err := store.Open(*data, store.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger key: %v\n", err)
		return exitRefused
	}
	_, werr := st.WorkspaceByName(*ws)
	st.Close()
	if werr != nil {
		fmt.Fprintf(stderr, "leaseplane ledger key: no workspace %q in %s\n", *ws, *data)
		return exitRefused
	}
	signer, _, err := sledger.EnsureKey(*data, *host, *ws, nil)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger key: %v\n", err)
		return exitRefused
	}
	v, err := kledger.VerifierOf(signer)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger key: %v\n", err)
		return exitRefused
	}
	fmt.Fprintln(stdout, v)
	return exitOK
}

// ledgerStatus prints what a workspace's ledger keeps, from the data folder.
func ledgerStatus(args []string, stdout, stderr io.Writer) int {
	fs := ledgerFlags("status", "status --data DIR --workspace W", stderr)
	data := fs.String("data", "./data", "the plane's data folder")
	wsName := fs.String("workspace", "default", "the workspace")
	if st, ok := parseCount(fs, args, 0); !ok {
		return st
	}
	if _, err := os.Stat(filepath.Join(*data, store.LedgerFileName)); err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger status: no ledger in %s (%v)\n", *data, err)
		return exitRefused
	}
	st, err := store.Open(*data, store.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger status: %v\n", err)
		return exitRefused
	}
	defer st.Close()
	ws, err := st.WorkspaceByName(*wsName)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger status: no workspace %q in %s\n", *wsName, *data)
		return exitRefused
	}
	ctx := context.Background()
	u, err := st.LedgerUsageOf(ctx, ws.ID)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger status: %v\n", err)
		return exitRefused
	}
	oldest, written, kept, err := st.LedgerOldestBody(ctx, ws.ID)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger status: %v\n", err)
		return exitRefused
	}
	per := "-"
	if u.Entries > 0 {
		per = strconv.FormatFloat(float64(u.Bytes)/float64(u.Entries), 'f', 1, 64)
	}
	fmt.Fprintf(stdout, "workspace     %s\n", *wsName)
	fmt.Fprintf(stdout, "entries       %d\n", u.Entries)
	fmt.Fprintf(stdout, "bytes         %d (%s an entry; bodies, tree hashes and grant look-ups, without SQLite's page overhead)\n", u.Bytes, per)
	if fi, err := os.Stat(filepath.Join(*data, store.LedgerFileName)); err == nil {
		fmt.Fprintf(stdout, "ledger.db     %d bytes (every workspace)\n", fi.Size())
	}
	switch {
	case kept:
		fmt.Fprintf(stdout, "oldest body   entry %d, written %s\n", oldest, time.UnixMilli(written).UTC().Format(time.RFC3339))
	case u.Entries == 0:
		fmt.Fprintf(stdout, "oldest body   none (no entries)\n")
	default:
		fmt.Fprintf(stdout, "oldest body   none kept (retention dropped the bodies below %d)\n", u.BodiesFrom)
	}
	if u.Exported == 0 {
		fmt.Fprintf(stdout, "export mark   none (no export recorded: retention drops nothing)\n")
	} else {
		fmt.Fprintf(stdout, "export mark   %d (bodies dropped below %d)\n", u.Exported, u.BodiesFrom)
	}
	return exitOK
}

// ledgerClient is a client of the plane at url (LEASEPLANE_URL when empty)
// with LEASEPLANE_KEY.
func ledgerClient(u string) *client.Client {
	if u == "" {
		u = os.Getenv("LEASEPLANE_URL")
	}
	if u == "" {
		u = defaultURL
	}
	return client.New(u, os.Getenv("LEASEPLANE_KEY"), &http.Client{Timeout: requestTimeout})
}

// ledgerGet GETs a ledger route and wants 200.
func ledgerGet(ctx context.Context, c *client.Client, route string) ([]byte, error) {
	st, b, _, err := c.Ledger(ctx, route)
	if err != nil {
		return nil, err
	}
	if st != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", route, st, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// fetchBundle reads the plane's key, latest checkpoint and every entry it
// covers, and checks the bundle they make against that key.
func fetchBundle(ctx context.Context, c *client.Client) (bundle []byte, vkey string, err error) {
	kb, err := ledgerGet(ctx, c, "key")
	if err != nil {
		return nil, "", err
	}
	vkey = strings.TrimSpace(string(kb))
	note, err := ledgerGet(ctx, c, "checkpoint")
	if err != nil {
		return nil, "", err
	}
	cp, err := kledger.Open(note, vkey)
	if err != nil {
		return nil, "", fmt.Errorf("the plane's checkpoint: %w", err)
	}
	b := kledger.Bundle{Checkpoint: note}
	for int64(len(b.Entries)) < cp.Size {
		n := min(cp.Size-int64(len(b.Entries)), int64(sledger.MaxEntries))
		page, err := ledgerGet(ctx, c, "entries?start="+strconv.Itoa(len(b.Entries))+"&count="+strconv.FormatInt(n, 10))
		if err != nil {
			return nil, "", err
		}
		var p struct {
			Entries []struct {
				Index int64  `json:"index"`
				Data  string `json:"data"`
			} `json:"entries"`
		}
		if err := json.Unmarshal(page, &p); err != nil {
			return nil, "", fmt.Errorf("entries from %d: %w", len(b.Entries), err)
		}
		if len(p.Entries) == 0 {
			return nil, "", fmt.Errorf("the plane has no entry %d, though its checkpoint covers %d", len(b.Entries), cp.Size)
		}
		for _, e := range p.Entries {
			if e.Index != int64(len(b.Entries)) {
				return nil, "", fmt.Errorf("the plane sent entry %d where %d belongs", e.Index, len(b.Entries))
			}
			data, err := base64.StdEncoding.DecodeString(e.Data)
			if err != nil {
				return nil, "", fmt.Errorf("entry %d: %w", e.Index, err)
			}
			b.Entries = append(b.Entries, data)
			if int64(len(b.Entries)) == cp.Size {
				break
			}
		}
	}
	bundle = b.Marshal()
	if _, err := kledger.Verify(bundle, vkey); err != nil {
		return nil, "", fmt.Errorf("the exported bundle does not verify: %w", err)
	}
	return bundle, vkey, nil
}

func ledgerExport(args []string, stdout, stderr io.Writer) int {
	fs := ledgerFlags("export", "export --url URL [--out FILE] [--no-mark]   (the key is LEASEPLANE_KEY; marking the export needs an operator key)", stderr)
	u := fs.String("url", "", "the plane (default LEASEPLANE_URL, else "+defaultURL+")")
	out := fs.String("out", "-", "where to write the bundle (- for stdout)")
	noMark := fs.Bool("no-mark", false, "do not tell the plane the entries were exported (then its --ledger-retention never drops them on this export's account)")
	if st, ok := parseCount(fs, args, 0); !ok {
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := ledgerClient(*u)
	bundle, vkey, err := fetchBundle(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger export: %v\n", err)
		return exitRefused
	}
	if *out == "-" {
		if _, err := stdout.Write(bundle); err != nil {
			fmt.Fprintf(stderr, "leaseplane ledger export: %v\n", err)
			return exitRefused
		}
	} else if err := writeSynced(*out, bundle); err != nil {
		fmt.Fprintf(stderr, "leaseplane ledger export: %v\n", err)
		return exitRefused
	}
	v, _ := kledger.Verify(bundle, vkey)
	fmt.Fprintf(stderr, "leaseplane ledger export: %s; verifier key %s\n", v.Summary(), vkey)
	if !*noMark {
		// Only once the bundle is written: the plane's retention may then
		// drop these entries' bodies.
		st, b, err := c.LedgerExported(ctx, v.Checkpoint.Size, v.Checkpoint.Root.String())
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "leaseplane ledger export: the export was not recorded by the plane: %v\n", err)
		case st != 200:
			fmt.Fprintf(stderr, "leaseplane ledger export: the export was not recorded by the plane: %d %s\n", st, bytes.TrimSpace(b))
		default:
			fmt.Fprintf(stderr, "leaseplane ledger export: recorded by the plane as exported: %s\n", bytes.TrimSpace(b))
		}
	}
	return exitOK
}

// writeSynced writes b to the file name and syncs it to disk before it
// returns.
func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// watchRecord is one line of a watch file: the verifier key (first line)
// or a checkpoint.
type watchRecord struct {
	Key        string `json:"key,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
}

func ledgerWatch(args []string, stdout, stderr io.Writer) int {
	fs := ledgerFlags("watch", "watch --url URL --file FILE [--every 10s] [--once]", stderr)
	u := fs.String("url", "", "the plane (default LEASEPLANE_URL, else "+defaultURL+")")
	file := fs.String("file", "", "the file of kept checkpoints, one JSON object a line (required)")
	every := fs.Duration("every", 10*time.Second, "how often to fetch the checkpoint")
	once := fs.Bool("once", false, "check one checkpoint and exit")
	if st, ok := parseCount(fs, args, 0); !ok {
		return st
	}
	if *file == "" {
		fmt.Fprintln(stderr, "leaseplane ledger watch: --file is required")
		return exitUsage
	}
	if *every <= 0 {
		fmt.Fprintln(stderr, "leaseplane ledger watch: --every must be above 0")
		return exitUsage
	}
	c := ledgerClient(*u)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		line, err := watchOnce(ctx, c, *file)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane ledger watch: %v\n", err)
			return exitRefused
		}
		fmt.Fprintln(stdout, line)
		if *once {
			return exitOK
		}
		time.Sleep(*every)
	}
}

// watchOnce fetches the checkpoint, checks it against the key and the last
// kept checkpoint in file, and appends it when it is new.
func watchOnce(ctx context.Context, c *client.Client, file string) (string, error) {
	var key string
	var last []byte
	if f, err := os.Open(file); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			var r watchRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return "", fmt.Errorf("%s line %d: %v", file, n, err)
			}
			if r.Key != "" && key == "" {
				key = r.Key
			}
			if r.Checkpoint != "" {
				last = []byte(r.Checkpoint)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return "", fmt.Errorf("read %s: %v", file, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var add []watchRecord
	if key == "" {
		kb, err := ledgerGet(ctx, c, "key")
		if err != nil {
			return "", err
		}
		key = strings.TrimSpace(string(kb))
		add = append(add, watchRecord{Key: key})
	}
	note, err := ledgerGet(ctx, c, "checkpoint")
	if err != nil {
		return "", err
	}
	cp, err := kledger.Open(note, key)
	if err != nil {
		return "", fmt.Errorf("the new checkpoint: %v", err)
	}
	msg := "checkpoint of size " + strconv.FormatInt(cp.Size, 10) + " kept"
	if last != nil {
		old, err := kledger.Open(last, key)
		if err != nil {
			return "", fmt.Errorf("the last kept checkpoint: %v", err)
		}
		switch {
		case cp.Size < old.Size:
			return "", fmt.Errorf("the plane's tree shrank from %d to %d entries: it is not the log whose checkpoints are kept", old.Size, cp.Size)
		case cp.Size == old.Size:
			if cp.Root != old.Root {
				return "", fmt.Errorf("FORK: two signed trees of size %d with different roots (%s kept, %s now)", cp.Size, old.Root, cp.Root)
			}
			return "checkpoint of size " + strconv.FormatInt(cp.Size, 10) + " unchanged", nil
		}
		b, err := ledgerGet(ctx, c, "consistency?from="+strconv.FormatInt(old.Size, 10)+"&to="+strconv.FormatInt(cp.Size, 10))
		if err != nil {
			return "", err
		}
		var p struct{ Hashes []string }
		if err := json.Unmarshal(b, &p); err != nil {
			return "", fmt.Errorf("consistency proof: %v", err)
		}
		proof := make([]kledger.Hash, len(p.Hashes))
		for i, h := range p.Hashes {
			if proof[i], err = kledger.ParseHash(h); err != nil {
				return "", fmt.Errorf("consistency proof hash %d: %v", i, err)
			}
		}
		if err := kledger.CheckConsistency(proof, cp.Size, cp.Root, old.Size, old.Root); err != nil {
			return "", fmt.Errorf("FORK: %v", err)
		}
		msg += ", consistent with the last kept one (size " + strconv.FormatInt(old.Size, 10) + ")"
	}
	add = append(add, watchRecord{Checkpoint: string(note)})
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	for _, r := range add {
		b, _ := json.Marshal(r)
		if _, err := f.Write(append(b, '\n')); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	return msg, f.Close()
}

func runVerify(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("verify", `usage: leaseplane verify --key VKEY FILE
Checks a receipt (c2sp.org/tlog-proof@v1) or a ledger bundle offline. FILE - reads stdin.
Exit status: 0 and a one-line summary when it holds; 1 and the first thing that does not.`, stderr)
	key := fs.String("key", "", "the verifier key (name+hash+base64), or a file holding it (required)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	if len(pos) != 1 || *key == "" {
		fmt.Fprintln(stderr, "leaseplane verify: want --key VKEY and one FILE")
		fs.Usage()
		return exitUsage
	}
	vkey := *key
	if !strings.Contains(vkey, "+") {
		b, err := os.ReadFile(vkey)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane verify: --key is neither a verifier key nor a readable file: %v\n", err)
			return exitUsage
		}
		vkey = strings.TrimSpace(string(b))
	}
	var data []byte
	if pos[0] == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane verify: %v\n", err)
		return exitUsage
	}
	v, err := kledger.Verify(data, vkey)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane verify: FAILS: %v\n", err)
		return exitRefused
	}
	fmt.Fprintln(stdout, v.Summary())
	return exitOK
}

// fetchReceipt asks for a lease's receipt, again while the plane says it
// is pending, for up to a minute.
func fetchReceipt(c *client.Client, leaseID string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		st, b, ra, err := c.Ledger(ctx, "receipt?leaseId="+url.QueryEscape(leaseID))
		if err != nil {
			return nil, err
		}
		switch st {
		case http.StatusOK:
			return b, nil
		case http.StatusAccepted, http.StatusServiceUnavailable:
			if ra <= 0 {
				ra = time.Second
			}
			select {
			case <-time.After(ra):
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("the receipt of %s is still pending", leaseID)
			}
		}
		return nil, fmt.Errorf("receipt of %s: HTTP %d: %s", leaseID, st, strings.TrimSpace(string(b)))
	}
}

// saveReceipt fetches a grant's receipt into file.
func saveReceipt(c *client.Client, leaseID, file string) error {
	r, err := fetchReceipt(c, leaseID)
	if err != nil {
		return err
	}
	return os.WriteFile(file, r, 0o644)
}
