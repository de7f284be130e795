package app_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/whilly-go/whilly/app"
)

// The generated seal key is written once (0600) and read back the same after; a file
// others may read is refused.
func TestTheGeneratedSealKeyIsKeptAndPrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", app.SealKeyFile)
	k1, created, err := app.LoadOrCreateSealKey(path)
	if err != nil || !created || len(k1) < app.MinSealKey {
		t.Fatalf("first start: %d bytes, created %t, %v", len(k1), created, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v; want mode 600", st, err)
	}
	k2, created, err := app.LoadOrCreateSealKey(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Fatalf("second start: same key %t, created %t, %v", bytes.Equal(k1, k2), created, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := app.LoadOrCreateSealKey(path); err == nil {
		t.Fatal("a seal key file others may read was used")
	}
}
