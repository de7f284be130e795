package agent

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestInjectionNeedlesAreSound: every built-in pattern has needles (so its regexp is
// skipped on text that cannot match), and no text the regexp matches lacks them. The
// texts are the words and signs of one pattern in its order, some left out, with
// separators, so that many of them match.
func TestInjectionNeedlesAreSound(t *testing.T) {
	t.Parallel()
	all := append(append([]scanPattern{}, injectionPatterns()...), squashedPatterns()...)
	word := regexp.MustCompile(`[a-z_0-9]{2,}|[<>|\[\]/.~${]`)
	var vocab [][]string // each pattern's words and signs, in its order
	for _, p := range all {
		if p.needles == nil {
			t.Errorf("pattern %s has no needles: it runs on every text", p.name)
		}
		vocab = append(vocab, word.FindAllString(p.re().String(), -1))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	matched := map[string]int{}
	for range 15000 {
		// Words of one pattern, in its order, some left out, some repeated, with
		// separators: many of these match some pattern.
		ws := vocab[rng.IntN(len(vocab))]
		var b strings.Builder
		for _, w := range ws {
			if rng.IntN(10) < 3 {
				continue
			}
			b.WriteString(w)
			b.WriteString([]string{" ", "", "  ", ". ", "-"}[rng.IntN(5)])
		}
		text := b.String()
		for _, sq := range []string{text, squash(text)} {
			for _, p := range all {
				if p.re().MatchString(sq) {
					matched[p.name]++
					if !p.mayMatch(sq) {
						t.Fatalf("pattern %s matches %q, which holds none of its needles %q", p.name, sq, p.needles)
					}
				}
			}
		}
	}
	if len(matched) < len(injectionPatterns())*2/3 {
		t.Fatalf("the random texts matched only %v: the check is too weak", matched)
	}
	t.Logf("matches per pattern: %v", matched)
}
