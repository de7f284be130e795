package control

import "testing"

func TestReasonClassIsBounded(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"exit_code: 1":                    "exit_code",
		"timeout":                         "timeout",
		"Verify_Failed: go vet":           "verify_failed",
		"prompt_injection_blocked (x)":    "prompt_injection_blocked",
		"agent_error boom":                "agent_error",
		"my own reason with a secret tok": "other",
		"":                                "other",
	} {
		if got := reasonClass(reason); got != want {
			t.Errorf("reasonClass(%q) = %q, want %q", reason, got, want)
		}
	}
	seen := map[string]bool{}
	for _, c := range reasonClasses() {
		if seen[c] {
			t.Errorf("class %q listed twice", c)
		}
		seen[c] = true
	}
	if !seen["other"] {
		t.Error(`"other" is not a class`)
	}
}
