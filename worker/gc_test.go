package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/worker"
)

func openWorkspace(t *testing.T, ws *worker.Workspaces, planID string, spec client.Workspace) *worker.Checkout {
	t.Helper()
	co, err := ws.Open(context.Background(), planID, spec)
	if err != nil {
		t.Fatalf("open the workspace of %s: %v", planID, err)
	}
	return co
}

func fileSpec(remote string) client.Workspace {
	return client.Workspace{CloneURL: "file://" + remote, BaseBranch: "main", Branch: "whilly/issue-1", Token: testToken}
}

// Two tasks of one plan on one machine never share the checkout at once: the second
// waits for the first to close it. Another plan's workspace is not held up.
func TestWorkspaceLockKeepsTasksApart(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	ws := worker.NewWorkspaces(t.TempDir(), "", nil)
	first := openWorkspace(t, ws, "p", fileSpec(remote))
	got := make(chan *worker.Checkout, 1)
	go func() {
		co, err := ws.Open(context.Background(), "p", fileSpec(remote))
		if err != nil {
			t.Error(err)
		}
		got <- co
	}()
	other := openWorkspace(t, ws, "q", fileSpec(remote))
	_ = other.Close()
	select {
	case <-got:
		t.Fatal("a second task opened a workspace that was in use")
	case <-time.After(300 * time.Millisecond):
	}
	_ = first.Close()
	select {
	case co := <-got:
		_ = co.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the second task never got the workspace")
	}
	// A waiting Open gives up with its context.
	held := openWorkspace(t, ws, "p", fileSpec(remote))
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := ws.Open(ctx, "p", fileSpec(remote)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open on a held workspace with a short deadline = %v", err)
	}
}

// gc removes workspaces unused for longer than --max-age, then the least recently used
// until the rest fit --max-size, and never one a task holds.
func TestGCRemovesOldWorkspaces(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	root := t.TempDir()
	ws := worker.NewWorkspaces(root, "", nil)
	for _, id := range []string{"old", "recent", "newest"} {
		_ = openWorkspace(t, ws, id, fileSpec(remote)).Close()
	}
	busy := openWorkspace(t, ws, "busy", fileSpec(remote))
	defer busy.Close()
	age := func(id string, d time.Duration) {
		at := time.Now().Add(-d)
		if err := os.Chtimes(ws.Dir(id)+".lock", at, at); err != nil {
			t.Fatal(err)
		}
	}
	age("old", 100*time.Hour)
	age("busy", 200*time.Hour)
	age("recent", 2*time.Hour)

	// The command line, dry: says what it would remove, removes nothing.
	var out, errOut bytes.Buffer
	code := workercli.Main(context.Background(), []string{"gc", "--dir", root, "--max-age", "72h", "--dry-run"}, &out, &errOut, func(string) string { return "" })
	if code != 0 || !strings.Contains(out.String(), "would remove "+ws.Dir("old")+" (plan old,") {
		t.Fatalf("gc --dry-run exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	if _, err := os.Stat(ws.Dir("old")); err != nil {
		t.Fatal("a dry run removed a workspace")
	}

	out.Reset()
	code = workercli.Main(context.Background(), []string{"gc", "--max-age", "72h", "--max-size", "0"}, &out, &errOut,
		func(k string) string {
			if k == string(config.WorkspaceDir) {
				return root
			}
			return ""
		})
	if code != 0 || !strings.Contains(out.String(), "workspaces_removed=1 ") || !strings.Contains(out.String(), "workspaces_busy=1") {
		t.Fatalf("gc exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	for id, want := range map[string]bool{"old": false, "busy": true, "recent": true, "newest": true} {
		_, err := os.Stat(ws.Dir(id))
		if (err == nil) != want {
			t.Errorf("workspace %s exists = %v, want %v", id, err == nil, want)
		}
		if _, err := os.Stat(ws.Dir(id) + ".lock"); (err == nil) != want {
			t.Errorf("lock of %s exists = %v, want %v", id, err == nil, want)
		}
	}

	// By size: the least recently used go first, until the rest fit.
	list, err := ws.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("List = %+v", list)
	}
	res, err := ws.GC(context.Background(), worker.GCOptions{MaxSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 2 || res.Removed[0].PlanID != "recent" || res.Removed[1].PlanID != "newest" || res.Busy != 1 || res.Kept != 1 {
		t.Fatalf("GC by size = %+v", res)
	}
	if _, err := os.Stat(busy.Dir); err != nil {
		t.Fatal("gc removed a workspace in use")
	}
	if _, err := os.Stat(storeOf(t, root)); err != nil {
		t.Fatal("gc removed the store of a workspace in use")
	}
	// Remove takes what is left once it is free; the repository's store stays for the
	// next plan until gc finds nobody uses it.
	_ = busy.Close()
	if err := ws.Remove(context.Background(), "busy"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 || entries[0].Name() != ".repos" {
		t.Fatalf("left after Remove: %v", entries)
	}
	store := storeOf(t, root)
	res, err = ws.GC(context.Background(), worker.GCOptions{MaxAge: time.Hour})
	if err != nil || len(res.Stores) != 0 {
		t.Fatalf("gc removed a store used a moment ago: %+v %v", res, err)
	}
	res, err = ws.GC(context.Background(), worker.GCOptions{MaxSize: 1})
	if err != nil || len(res.Stores) != 1 || res.Stores[0].Dir != store || res.FreedBytes == 0 {
		t.Fatalf("GC of the unused store = %+v %v", res, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, ".repos")); len(entries) != 0 {
		t.Fatalf("left after gc: %v", entries)
	}
}

// storeOf returns the one repository store under root.
func storeOf(t *testing.T, root string) string {
	t.Helper()
	stores, err := filepath.Glob(filepath.Join(root, ".repos", "*.git"))
	if err != nil || len(stores) != 1 {
		t.Fatalf("stores under %s: %v %v, want one", root, stores, err)
	}
	return stores[0]
}

// Over HTTP (git's smart protocol through git-http-backend) the token is what
// authenticates the fetch and the push, sent as GitHub takes it; it never lands in
// .git/config. A wrong token fails the workspace without echoing it.
func TestTokenAuthenticatesOverHTTP(t *testing.T) {
	t.Parallel()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("no git-http-backend: %v", err)
	}
	remote := newRemote(t)
	gitIn(t, remote, "config", "http.receivepack", "true")
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testToken))
	var refused atomic.Int32
	cgiHandler := &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(remote),
		"GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	root := t.TempDir()
	ws := worker.NewWorkspaces(root, "", nil)
	spec := client.Workspace{CloneURL: srv.URL + "/git/" + filepath.Base(remote), Branch: "whilly/issue-9", Token: testToken}
	co := openWorkspace(t, ws, "h", spec) // no base branch: the remote's default (main)
	boxCfg, err := os.ReadFile(filepath.Join(co.Dir, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(co.Dir, "feature.txt"), "new\n")
	pub, err := co.Publish(context.Background(), worker.CommitMessage("h", "T1", "Add the feature"))
	if err != nil {
		t.Fatal(err)
	}
	if head := gitIn(t, remote, "rev-parse", "refs/heads/whilly/issue-9"); pub.HeadSHA != head {
		t.Fatalf("published %s, remote head %s", pub.HeadSHA, head)
	}
	storeCfg, err := os.ReadFile(filepath.Join(storeOf(t, root), "config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []string{string(boxCfg), string(storeCfg)} {
		if strings.Contains(cfg, testToken) || strings.Contains(cfg, "extraheader") || strings.Contains(cfg, "Authorization") {
			t.Fatalf("a git config holds credentials:\n%s", cfg)
		}
	}
	_ = co.Close()
	if refused.Load() != 0 {
		t.Fatalf("%d requests came without the token", refused.Load())
	}

	bad := spec
	bad.Token = "tok-wrong-0123456789"
	_, err = ws.Open(context.Background(), "h", bad)
	var we *worker.WorkspaceError
	if !errors.As(err, &we) || we.Stage != "fetch" || strings.Contains(err.Error(), bad.Token) {
		t.Fatalf("Open with a wrong token = %v, want a fetch failure that does not show the token", err)
	}
	if refused.Load() == 0 {
		t.Fatal("the server never saw the wrong token refused")
	}
}

// A workspace spec that would put credentials in .git/config, or a branch that is not
// a branch, is refused before git runs.
func TestWorkspaceSpecIsValidated(t *testing.T) {
	t.Parallel()
	ws := worker.NewWorkspaces(t.TempDir(), "", nil)
	for _, spec := range []client.Workspace{
		{CloneURL: "https://x-access-token:secret@github.com/o/r.git", Branch: "whilly/issue-1"},
		{CloneURL: "https://github.com/o/r.git", Branch: "-x"},
		{CloneURL: "https://github.com/o/r.git", Branch: "whilly/../main"},
		{CloneURL: "https://github.com/o/r.git", Branch: "b", BaseBranch: "main.lock"},
		{CloneURL: "ext::sh -c evil", Branch: "b"},
		{CloneURL: "--upload-pack=evil", Branch: "b"},
	} {
		if co, err := ws.Open(context.Background(), "v", spec); err == nil {
			_ = co.Close()
			t.Errorf("Open(%+v) succeeded", spec)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// An expired push token is reported as such, before git tries it.
func TestExpiredTokenIsReported(t *testing.T) {
	t.Parallel()
	ws := worker.NewWorkspaces(t.TempDir(), "", nil)
	spec := fileSpec(newRemote(t))
	past := time.Now().Add(-time.Minute)
	spec.TokenExpiresAt = &past
	_, err := ws.Open(context.Background(), "e", spec)
	var we *worker.WorkspaceError
	if !errors.As(err, &we) || we.Stage != "fetch" || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Open with an expired token = %v", err)
	}
}

// A checkout broken between tasks (its .git replaced, as an agent might) is cloned
// afresh by the next task instead of failing it.
func TestBrokenWorkspaceIsClonedAfresh(t *testing.T) {
	t.Parallel()
	ws := worker.NewWorkspaces(t.TempDir(), "", nil)
	spec := fileSpec(newRemote(t))
	co := openWorkspace(t, ws, "b", spec)
	dir := co.Dir
	_ = co.Close()
	if err := os.RemoveAll(filepath.Join(dir, ".git")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ".git"), "gitdir: /nonexistent\n")
	co = openWorkspace(t, ws, "b", spec)
	if _, err := os.Stat(filepath.Join(co.Dir, "README.md")); err != nil {
		t.Fatalf("the fresh checkout lacks the remote's files: %v", err)
	}
	_ = co.Close()
	// A broken index (the worker died writing it) is started over too.
	writeFile(t, dir+".index", "not an index")
	if err := os.Remove(filepath.Join(dir, "README.md")); err != nil {
		t.Fatal(err)
	}
	co = openWorkspace(t, ws, "b", spec)
	defer co.Close()
	if b, err := os.ReadFile(filepath.Join(co.Dir, "README.md")); err != nil || string(b) != "# shop\n" {
		t.Fatalf("the checkout after a broken index: README.md = %q %v", b, err)
	}
}
