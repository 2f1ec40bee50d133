package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/store"
)

const keysUsage = `usage:
  leaseplane keys create --data DIR --workspace NAME [--agent DID | --operator] [--new-workspace [--rules JSON]] [--init]
  leaseplane keys list   --data DIR [--workspace NAME]
  leaseplane keys revoke --data DIR ID|KEY

create prints the new key as the last word on stdout. It refuses a data
folder that does not exist (--init makes one) and a workspace that does not
exist (--new-workspace makes it, with --rules, e.g. '{"readShared":["file:"]}',
else none), so that a typo creates nothing. Keys are stored only as hashes: the key is shown once.
A workspace key may name any agent of its workspace; an agent key (--agent)
only that DID; an operator key (--operator) what a workspace key may, and
POST /api/v1/acp/operator/suspend and /resume.
When a server runs on DIR, revoke returns once that server has stopped
accepting the key (it reads revocations every 50 ms).`

func runKeys(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSubverb("keys", keysUsage, map[string]subverb{"create": keysCreate, "list": keysList, "revoke": keysRevoke},
		args, stdout, stderr)
}

func keysFlags(verb string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("keys "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, keysUsage) }
	data := fs.String("data", "./data", "data folder of the server")
	return fs, data
}

// haveData reports whether data is a plane's data folder (it holds the
// command log); when it is not, it says so on stderr, so that a mistyped
// --data creates nothing.
func haveData(verb, data string, stderr io.Writer) bool {
	if _, err := os.Stat(filepath.Join(data, store.FileName)); err != nil {
		fmt.Fprintf(stderr, "leaseplane %s: %s is not a leaseplane data folder (no %s there); nothing was created.\n"+
			"  Give the folder leaseplane serve uses (--data), or make a new one with leaseplane serve or keys create --init\n",
			verb, data, store.FileName)
		return false
	}
	return true
}

// openStore opens the store in data for the verb; it says on stderr why
// it could not. Only a data folder that exists is opened.
func openStore(verb, data string, stderr io.Writer) (*store.Store, bool) {
	if !haveData(verb, data, stderr) {
		return nil, false
	}
	return openStoreCreating(verb, data, stderr)
}

// openStoreCreating opens the store in data, making the folder when it
// does not exist.
func openStoreCreating(verb, data string, stderr io.Writer) (*store.Store, bool) {
	st, err := store.Open(data, store.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane %s: %v\n", verb, err)
		return nil, false
	}
	return st, true
}

func keysCreate(args []string, stdout, stderr io.Writer) int {
	fs, data := keysFlags("create", stderr)
	wsName := fs.String("workspace", "", "workspace name (created when missing)")
	agent := fs.String("agent", "", "make an agent key for this DID")
	operator := fs.Bool("operator", false, "make an operator key")
	rules := fs.String("rules", "", `rules of a new workspace, e.g. {"readShared":["file:"]}`)
	newWS := fs.Bool("new-workspace", false, "make the workspace when it does not exist (else that is refused, so a typo makes nothing)")
	initData := fs.Bool("init", false, "make the data folder (and the workspace) when it does not exist")
	if _, code, ok := parsePositional(fs, args, 0, "no arguments"); !ok {
		return code
	}
	if *wsName == "" {
		fmt.Fprintln(stderr, "leaseplane keys create: --workspace is required")
		return 2
	}
	if *agent != "" && *operator {
		fmt.Fprintln(stderr, "leaseplane keys create: --agent and --operator exclude each other")
		return 2
	}
	role := store.RoleWorkspace
	switch {
	case *agent != "":
		role = store.RoleAgent
		if err := (kernel.Command{Op: kernel.OpSuspend, ActorDid: *agent}).Validate(); err != nil {
			fmt.Fprintf(stderr, "leaseplane keys create: --agent: %v\n", err)
			return 2
		}
	case *operator:
		role = store.RoleOperator
	}
	if *rules != "" {
		if _, err := kernel.ParseRules([]byte(*rules)); err != nil {
			fmt.Fprintf(stderr, "leaseplane keys create: --rules: %v\n", err)
			return 2
		}
	}
	if err := store.ValidWorkspaceName(*wsName); err != nil {
		fmt.Fprintf(stderr, "leaseplane keys create: --workspace: %v\n", err)
		return 2
	}
	if *initData {
		*newWS = true
	} else if !haveData("keys create", *data, stderr) {
		return 1
	}
	st, ok := openStoreCreating("keys create", *data, stderr)
	if !ok {
		return 1
	}
	defer st.Close()
	if _, err := st.WorkspaceByName(*wsName); err != nil && !*newWS {
		names := []string{}
		if ws, err := st.Workspaces(); err == nil {
			for _, w := range ws {
				if !store.IsDrillWorkspace(w.Name) {
					names = append(names, w.Name)
				}
			}
		}
		fmt.Fprintf(stderr, "leaseplane keys create: %s has no workspace %q (it has: %s); nothing was created.\n"+
			"  Pass --new-workspace to make it\n", *data, *wsName, strings.Join(names, ", "))
		return 1
	}
	now := time.Now().UnixMilli()
	w, created, err := st.EnsureWorkspace(*wsName, []byte(*rules), now)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane keys create: %v\n", err)
		return 1
	}
	if !created && *rules != "" && string(w.Rules) != *rules {
		fmt.Fprintf(stderr, "leaseplane keys create: workspace %s exists with rules %s; --rules applies only to a new workspace\n", w.Name, w.Rules)
		return 1
	}
	key, k, err := st.CreateKey(w, role, *agent, now)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane keys create: %v\n", err)
		return 1
	}
	if created {
		fmt.Fprintf(stderr, "created workspace %s\n", w.Name)
	}
	desc := string(role) + " key " + k.ID + " of workspace " + w.Name
	if role == store.RoleAgent {
		desc += " for " + *agent
	}
	fmt.Fprintf(stdout, "%s (shown only now): %s\n", desc, key)
	return 0
}

func keysList(args []string, stdout, stderr io.Writer) int {
	fs, data := keysFlags("list", stderr)
	wsName := fs.String("workspace", "", "list only this workspace's keys")
	if _, code, ok := parsePositional(fs, args, 0, "no arguments"); !ok {
		return code
	}
	st, ok := openStore("keys list", *data, stderr)
	if !ok {
		return 1
	}
	defer st.Close()
	keys, err := st.Keys(*wsName)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane keys list: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKSPACE\tROLE\tAGENT\tCREATED\tREVOKED")
	for _, k := range keys {
		agent, revoked := k.AgentDID, "-"
		if agent == "" {
			agent = "-"
		}
		if k.RevokedMs != 0 {
			revoked = time.UnixMilli(k.RevokedMs).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Workspace, k.Role, agent,
			time.UnixMilli(k.CreatedMs).UTC().Format(time.RFC3339), revoked)
	}
	tw.Flush()
	return 0
}

// revokeWait bounds how long keys revoke waits for a running server to
// confirm a revocation.
const revokeWait = 5 * time.Second

func keysRevoke(args []string, stdout, stderr io.Writer) int {
	fs, data := keysFlags("revoke", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "leaseplane keys revoke: give exactly one key id (from keys list) or key")
		return 2
	}
	st, ok := openStore("keys revoke", *data, stderr)
	if !ok {
		return 1
	}
	defer st.Close()
	k, err := st.RevokeKey(pos[0], time.Now().UnixMilli())
	if errors.Is(err, store.ErrNotFound) {
		fmt.Fprintf(stderr, "leaseplane keys revoke: no key %s in %s\n", pos[0], st.Path())
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane keys revoke: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "revoked %s key %s of workspace %s\n", k.Role, k.ID, k.Workspace)
	if server.DataDirInUse(*data) {
		// The running server drops its cached keys when it sees the key
		// epoch rise, and records that it has: wait for it.
		epoch, _, err := st.KeyEpochs(context.Background())
		for deadline := time.Now().Add(revokeWait); err == nil && time.Now().Before(deadline); {
			var applied int64
			if _, applied, err = st.KeyEpochs(context.Background()); err == nil && applied >= epoch {
				fmt.Fprintln(stdout, "the server running on "+*data+" no longer accepts it")
				return 0
			}
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprintf(stderr, "leaseplane keys revoke: warning: the server running on %s has not confirmed the revocation within %s (%v); it stops accepting the key when it next reads the store\n", *data, revokeWait, err)
	}
	return 0
}
