package control

import (
	"regexp"
	"strings"
	"testing"
)

// uuidRegexp is what isUUID checks, as a regexp.
var uuidRegexp = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// TestIsUUID: isUUID accepts what the regexp of a UUID accepts, and only that.
func TestIsUUID(t *testing.T) {
	t.Parallel()
	const good = "0b8f1e52-3c1a-4d6e-9a7B-2f4c5d6e7f80"
	cases := []string{good, strings.ToUpper(good), "", "0b8f1e52", good + "\n", "\n" + good, good + "0",
		strings.Replace(good, "-", "0", 1), strings.Replace(good, "0", "g", 1), strings.Replace(good, "b", "-", 1),
		"0b8f1e523c1a4d6e9a7b2f4c5d6e7f80", "{" + good[1:35] + "}", strings.Replace(good, "0", "٠", 1)}
	for i := range len(good) { // every position: a character out of place
		for _, c := range []byte{'-', 'x', '0', 0, 0xff} {
			cases = append(cases, good[:i]+string(c)+good[i+1:])
		}
	}
	for _, s := range cases {
		if got, want := isUUID(s), uuidRegexp.MatchString(s); got != want {
			t.Errorf("isUUID(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}

func BenchmarkIsUUID(b *testing.B) {
	const s = "0b8f1e52-3c1a-4d6e-9a7b-2f4c5d6e7f80"
	b.Run("loop", func(b *testing.B) {
		for b.Loop() {
			isUUID(s)
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for b.Loop() {
			uuidRegexp.MatchString(s)
		}
	})
}
