package web

import "time"

// SetClock sets the clock of GitHub's cached answers on write access (tests).
func SetClock(h *Handler, now func() time.Time) { h.now = now }
