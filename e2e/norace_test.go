//go:build linux && !race

package e2e_test

const raceEnabled = false
