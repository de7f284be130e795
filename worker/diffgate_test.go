package worker

import (
	"strings"
	"testing"
)

func rules(rs []DiffReason) string {
	var out []string
	for _, r := range rs {
		s := r.Rule
		if r.Path != "" {
			s += ":" + r.Path
		}
		if r.Kind != "" {
			s += ":" + r.Kind
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestCheckDiff(t *testing.T) {
	t.Parallel()
	// Fake secrets assembled at run time, so no scanner mistakes this file for a leak.
	ghToken := "ghp_" + strings.Repeat("A1b2", 9)
	pem := "-----BEGIN " + "RSA PRIVATE KEY-----"
	files := func(paths ...string) []FileChange {
		var fs []FileChange
		for _, p := range paths {
			fs = append(fs, FileChange{Path: p, Added: 1})
		}
		return fs
	}
	added := func(path string, lines ...string) []AddedLine {
		var out []AddedLine
		for i, l := range lines {
			out = append(out, AddedLine{Path: path, Line: i + 1, Text: l})
		}
		return out
	}
	many := make([]FileChange, 201)
	for i := range many {
		many[i] = FileChange{Path: "f" + strings.Repeat("x", i%5), Added: 1}
	}
	cases := []struct {
		name string
		diff Diff
		lim  DiffLimits
		want string
	}{
		{"clean", Diff{Files: files("app/login.go"), Added: added("app/login.go", "func login() {}")}, DiffLimits{}, ""},
		{"workflow file", Diff{Files: files(".github/workflows/ci.yml")}, DiffLimits{}, "workflow_file:.github/workflows/ci.yml"},
		{"workflow file allowed", Diff{Files: files(".github/workflows/ci.yml")}, DiffLimits{AllowWorkflows: true}, ""},
		{"workflows dir replaced by a symlink", Diff{Files: files(".github/workflows")}, DiffLimits{}, "workflow_file:.github/workflows"},
		{"nested workflow", Diff{Files: files(".github/workflows/sub/x.yaml")}, DiffLimits{}, "workflow_file:.github/workflows/sub/x.yaml"},
		{"the rest of .github is protected", Diff{Files: files(".github/CODEOWNERS", ".github/workflows-doc.md")}, DiffLimits{},
			"protected_path:.github/CODEOWNERS protected_path:.github/workflows-doc.md"},
		{"only at the root", Diff{Files: files("docs/.github/workflows/x.yml", ".githubx", "x/.gitmodules")}, DiffLimits{}, ""},
		{"case tricks", Diff{Files: files(".GitHub/Workflows/x.yml", ".GITHUB/dependabot.yml", ".GitModules")}, DiffLimits{},
			"workflow_file:.GitHub/Workflows/x.yml protected_path:.GITHUB/dependabot.yml protected_path:.GitModules"},
		{"own protected paths", Diff{Files: files("deploy/prod.tf", "deploy/x/y.TF", "src/a.go")}, DiffLimits{Protected: []string{"deploy/**/*.tf", "*.lock"}},
			"protected_path:deploy/prod.tf protected_path:deploy/x/y.TF"},
		{"symlink into .github", Diff{Files: []FileChange{{Path: "docs/ci", Mode: modeSymlink, Target: "../.github/workflows"}}}, DiffLimits{},
			"workflow_file:docs/ci"},
		{"symlink replacing .github", Diff{Files: []FileChange{{Path: ".github", Mode: modeSymlink, Target: "evil"}}}, DiffLimits{},
			"protected_path:.github"},
		{"symlink out of the repository", Diff{Files: []FileChange{{Path: "a/l", Mode: modeSymlink, Target: "../../etc/passwd"},
			{Path: "b", Mode: modeSymlink, Target: "/root/.ssh/id_rsa"}, {Path: "c", Mode: modeSymlink, Target: ".GIT/hooks"}}}, DiffLimits{},
			"symlink:a/l symlink:b symlink:c"},
		{"harmless symlink", Diff{Files: []FileChange{{Path: "docs/readme", Mode: modeSymlink, Target: "../README.md"}}}, DiffLimits{}, ""},
		{"submodule", Diff{Files: []FileChange{{Path: "vendor/x", Mode: modeGitlink}}}, DiffLimits{}, "submodule:vendor/x"},
		{"a large file", Diff{Files: []FileChange{{Path: "blob.bin", Binary: true, Bytes: 30 << 20}}}, DiffLimits{},
			"file_too_large:blob.bin too_many_bytes"},
		{"many files, large together", Diff{Files: []FileChange{{Path: "a", Bytes: 600}, {Path: "b", Bytes: 600}}}, DiffLimits{MaxBytes: 1000},
			"too_many_bytes"},
		{"too many files (default limit)", Diff{Files: many}, DiffLimits{}, "too_many_files"},
		{"file limit", Diff{Files: files("a", "b", "c")}, DiffLimits{MaxFiles: 2}, "too_many_files"},
		{"at the file limit", Diff{Files: files("a", "b")}, DiffLimits{MaxFiles: 2}, ""},
		{"line limit counts added and deleted", Diff{Files: []FileChange{{Path: "a", Added: 6, Deleted: 5}}}, DiffLimits{MaxLines: 10}, "too_many_lines"},
		{"binary files count as files only", Diff{Files: []FileChange{{Path: "logo.png", Binary: true}}}, DiffLimits{MaxLines: 1}, ""},
		{"github token", Diff{Files: files("config.go"), Added: added("config.go", "const t = \""+ghToken+"\"")}, DiffLimits{}, "secret:config.go:github_token"},
		{"private key", Diff{Files: files("id_rsa"), Added: added("id_rsa", pem, "MIIEpAIBAAKCAQEA")}, DiffLimits{}, "secret:id_rsa:private_key"},
		{"literal password", Diff{Files: files("db.yml"), Added: added("db.yml", "password: hunter22")}, DiffLimits{}, "secret:db.yml:assignment"},
		{"literal api key in code", Diff{Files: files("x.py"), Added: added("x.py", `API_KEY = "a8f5f167f44f4964e6c998dee827110c"`)}, DiffLimits{}, "secret:x.py:assignment"},
		{"password in a URL", Diff{Files: files(".env"), Added: added(".env", "DATABASE_URL=postgres://app:pa55w0rd1@db/app")}, DiffLimits{}, "secret:.env:url_credentials"},
		// Code that handles secrets is not a secret.
		{"code reading a token", Diff{Files: files("auth.go"), Added: added("auth.go",
			`token := r.Header.Get("Authorization")`,
			`if password == "" {`,
			`cfg.Token = os.Getenv("WHILLY_WORKER_TOKEN")`,
			`secret: ${{ secrets.DEPLOY_KEY }}`,
			`Authorization: Bearer $TOKEN`,
			`api_key: "<your key here>"`,
			`password: changeme123`,
			`token = cfg.Token`,
			`DATABASE_URL=postgres://postgres:postgres@localhost/app`,
		)}, DiffLimits{}, ""},
		{"everything at once", Diff{Files: append(files(".github/workflows/x.yml"), FileChange{Path: "k", Added: 30}),
			Added: added("k", ghToken)}, DiffLimits{MaxLines: 10},
			"workflow_file:.github/workflows/x.yml too_many_lines secret:k:github_token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := CheckDiff(c.diff, c.lim)
			if rules(got) != c.want {
				t.Fatalf("CheckDiff = %q, want %q", rules(got), c.want)
			}
			for _, r := range got {
				if strings.Contains(r.Detail, ghToken) || strings.Contains(r.Detail, "hunter22") {
					t.Fatalf("a reason holds the secret: %+v", r)
				}
			}
		})
	}
}

func TestCheckDiffBoundsSecretReasons(t *testing.T) {
	t.Parallel()
	var d Diff
	d.Files = []FileChange{{Path: "k", Added: 50}}
	for i := range 50 {
		d.Added = append(d.Added, AddedLine{Path: "k", Line: i + 1, Text: "ghp_" + strings.Repeat("Z9", 18)})
	}
	if got := CheckDiff(d, DiffLimits{}); len(got) != maxSecretReasons {
		t.Fatalf("%d reasons, want %d", len(got), maxSecretReasons)
	}
}

func TestLooksLiteral(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"hunter22": true, `"s3cr3t!x"`: true, "a8f5f167f44f4964": true, "Zx9-Qw8_Er7": true,
		"hunter2": false, "=": false, `os.Getenv(`: false, "cfg.Token": false, "secretvalue": false,
		"${TOKEN}": false, "<token>": false, "changeme123": false, "example-key-123": false, "xxxxxxxxxxxx": false,
	} {
		if got := looksLiteral(v); got != want {
			t.Errorf("looksLiteral(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParseNumstat(t *testing.T) {
	t.Parallel()
	out := "3\t1\tapp/login.go\x00-\t-\tlogo.png\x000\t12\told file.txt\x00"
	got, err := parseNumstat([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []FileChange{{Path: "app/login.go", Added: 3, Deleted: 1}, {Path: "logo.png", Binary: true}, {Path: "old file.txt", Deleted: 12}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("file %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := parseNumstat([]byte("x\ty\tz\x00")); err == nil {
		t.Error("a malformed record was accepted")
	}
}

func TestParseAddedLines(t *testing.T) {
	t.Parallel()
	patch := `diff --git a/app/login.go b/app/login.go
index 1111111..2222222 100644
--- a/app/login.go
+++ b/app/login.go
@@ -10,0 +11,2 @@ func x() {
+first
+++ not a header
@@ -20 +22 @@
-old
+second
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git "a/sp\303\251cial \"q\".txt" "b/sp\303\251cial \"q\".txt"
new file mode 100644
--- /dev/null
+++ "b/sp\303\251cial \"q\".txt"
@@ -0,0 +1 @@
+hello
diff --git a/logo.png b/logo.png
Binary files a/logo.png and b/logo.png differ
`
	got := parseAddedLines([]byte(patch))
	want := []AddedLine{
		{"app/login.go", 11, "first"}, {"app/login.go", 12, "++ not a header"}, {"app/login.go", 22, "second"},
		{`spécial "q".txt`, 1, "hello"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCommitMessage(t *testing.T) {
	t.Parallel()
	got := CommitMessage("shop", "AUTH-1", "\n  Add rate limiting to /login  \nmore detail")
	want := "AUTH-1: Add rate limiting to /login\n\nWhilly-Plan: shop\nWhilly-Task: AUTH-1\n"
	if got != want {
		t.Fatalf("CommitMessage = %q, want %q", got, want)
	}
	long := CommitMessage("p", "T", strings.Repeat("é", 300))
	subject, _, _ := strings.Cut(long, "\n")
	if n := len([]rune(subject)); n > 100 || !strings.HasSuffix(subject, "…") {
		t.Fatalf("long subject has %d runes: %q", n, subject)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"5GB": 5e9, "500MB": 5e8, "2GiB": 2 << 30, "1024": 1024, "1.5kb": 1500, "0": 0, " 3 gb ": 3e9} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GB", "-1GB", "5XB", "lots"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}
