package app

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SealKeyFile is the file, in WHILLY_DATA_DIR, of the push token seal secret whilly
// generates when WHILLY_TOKEN_SEAL_KEY is unset.
const SealKeyFile = "token-seal.key"

// LoadOrCreateSealKey reads the seal secret in path, or, when there is none, writes a
// new random one there (mode 0600, never replacing a file another process wrote
// meanwhile) and reports that it did. It serves one control plane: control planes that
// share a database but not this file cannot open each other's tokens.
func LoadOrCreateSealKey(path string) (key []byte, created bool, err error) {
	if key, err := readSealKey(path); !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("create the directory of %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-seal-*.key")
	if err != nil {
		return nil, false, fmt.Errorf("write the push token seal key: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.WriteString(base64.RawStdEncoding.EncodeToString(b) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("write the push token seal key to %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process was first: its key is the one
			key, err := readSealKey(path)
			return key, false, err
		}
		return nil, false, fmt.Errorf("write the push token seal key to %s: %w", path, err)
	}
	key, err = readSealKey(path)
	return key, err == nil, err
}

// readSealKey reads a seal secret file; one others may read is refused.
func readSealKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read the push token seal key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %o): run chmod 600 on it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the push token seal key: %w", err)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < MinSealKey {
		return nil, fmt.Errorf("%s holds %d bytes, not a seal key of %d or more", path, len(key), MinSealKey)
	}
	return key, nil
}
