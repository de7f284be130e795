//go:build !linux

package agent

func becomeSubreaper() {}
