package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	ms, err := load(fstest.MapFS{
		"0002_more.up.sql":   file("up 2"),
		"0002_more.down.sql": file("down 2"),
		"0001_init.up.sql":   file("up 1"),
		"0001_init.down.sql": file("down 1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (Migration{1, "init", "up 1", "down 1"}) || ms[1] != (Migration{2, "more", "up 2", "down 2"}) {
		t.Errorf("load = %+v", ms)
	}

	for name, fsys := range map[string]fstest.MapFS{
		"bad name":     {"0001-init.up.sql": file("x")},
		"no down":      {"0001_init.up.sql": file("x")},
		"empty down":   {"0001_init.up.sql": file("x"), "0001_init.down.sql": file("")},
		"two names":    {"0001_a.up.sql": file("x"), "0001_b.down.sql": file("x")},
		"version zero": {"0000_init.up.sql": file("x"), "0000_init.down.sql": file("x")},
		"other file":   {"README.md": file("x")},
	} {
		if _, err := load(fsys); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestEmbeddedMigrations(t *testing.T) {
	t.Parallel()
	ms, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].Up, "CREATE TABLE events") {
		t.Fatalf("All = %d migrations, first %+v", len(ms), ms[0].Name)
	}
	for i, m := range ms {
		// Gaps are allowed: parallel branches each take their own number.
		if i > 0 && m.Version <= ms[i-1].Version {
			t.Errorf("migration %d_%s: versions must increase", m.Version, m.Name)
		}
	}
	a, err := Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := Fingerprint(); a != b || len(a) != 64 {
		t.Errorf("Fingerprint = %q then %q", a, b)
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	if got := (Result{Direction: "up"}).String(); got != "schema is up to date" {
		t.Errorf("empty up = %q", got)
	}
	if got := (Result{Direction: "down"}).String(); got != "nothing to roll back" {
		t.Errorf("empty down = %q", got)
	}
	res := Result{Direction: "down", Steps: []Step{{Line: LineWhilly, Version: 1, Name: "init"}, {Line: LineRiver, Version: 6, Name: "bulk unique"}}}
	if got, want := res.String(), "rolled back whilly migration 0001_init (0s)\nrolled back river migration 006 bulk unique (0s)"; got != want {
		t.Errorf("Result.String() = %q, want %q", got, want)
	}
	table := States{{Line: LineWhilly, Version: 1, Name: "init", Applied: true}, {Line: LineRiver, Version: 2, Name: "initial schema"}}.String()
	for _, want := range []string{"LINE", "0001_init", "applied", "002 initial schema", "pending"} {
		if !strings.Contains(table, want) {
			t.Errorf("States.String() lacks %q:\n%s", want, table)
		}
	}
}
