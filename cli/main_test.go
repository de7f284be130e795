package cli

import (
	"os"
	"testing"

	"github.com/whilly-go/whilly/sandbox"
)

// TestMain lets this test binary be the init of the sandboxes its commands make, as the
// whilly binary is.
func TestMain(m *testing.M) {
	sandbox.HandleInit()
	os.Exit(m.Run())
}

// unboxedEnv is env as a getenv whose agents run unboxed (WHILLY_SANDBOX=none) unless env
// says otherwise: the fake agents of these tests read their answers from files outside
// any workspace, which the sandbox rightly hides.
func unboxedEnv(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok || k != "WHILLY_SANDBOX" {
			return v
		}
		return sandbox.ModeNone
	}
}
