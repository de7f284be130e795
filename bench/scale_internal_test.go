package bench

import (
	"testing"
	"time"
)

func msGroup(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

// TestChanceSpreadTellsAFavouredInstallationFromScatter: one installation served ten
// times faster than nineteen others makes a spread that random deals of the same times do
// not; rounds of deliveries slow for every installation alike are no installation's
// doing, and deals keep them where they were (dealt across rounds, a group would often get
// three slow times of five).
func TestChanceSpreadTellsAFavouredInstallationFromScatter(t *testing.T) {
	t.Parallel()
	favoured := [][]time.Duration{msGroup(10, 11, 12, 13, 14)}
	for i := range 19 {
		favoured = append(favoured, msGroup(100+i, 120+i, 140+i, 160+i, 180+i))
	}
	got, fastest, slowest := spread(favoured)
	if fastest != 12*time.Millisecond || slowest != 158*time.Millisecond {
		t.Fatalf("medians: fastest %v, slowest %v; want 12ms and 158ms", fastest, slowest)
	}
	chance := chanceSpread(favoured, chanceDeals)
	if chance >= got/2 {
		t.Errorf("a favoured installation: spread %.2f, by chance %.2f; want chance well below", got, chance)
	}
	if again := chanceSpread(favoured, chanceDeals); again != chance {
		t.Errorf("chanceSpread is not repeatable: %.3f then %.3f", chance, again)
	}

	var slowRound [][]time.Duration
	for range 20 {
		slowRound = append(slowRound, msGroup(900, 900, 100, 100, 100))
	}
	if got, _, _ := spread(slowRound); got != 1 {
		t.Fatalf("installations with the same times: spread %.2f, want 1", got)
	}
	if chance := chanceSpread(slowRound, chanceDeals); chance != 1 {
		t.Errorf("two first rounds slow for every installation, dealt at random: spread %.2f, want 1", chance)
	}
}
