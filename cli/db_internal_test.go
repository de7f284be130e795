package cli

import "testing"

// TestDefaultPoolSize: 16 connections, or 4 per core when the embedded cluster shares a
// machine of fewer than 4 cores; a Postgres of its own (WHILLY_DATABASE_URL) keeps 16
// whatever this machine's cores.
func TestDefaultPoolSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		embedded bool
		cores    int
		want     int32
	}{
		{true, 1, 4}, {true, 2, 8}, {true, 3, 12}, {true, 4, 16}, {true, 64, 16},
		{false, 1, 16}, {false, 2, 16}, {false, 64, 16},
	} {
		if got := defaultPoolSize(c.embedded, c.cores); got != c.want {
			t.Errorf("defaultPoolSize(embedded %t, %d cores) = %d, want %d", c.embedded, c.cores, got, c.want)
		}
	}
}
