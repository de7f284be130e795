//go:build !linux

package sandbox

import "errors"

// cgroupParent makes no cgroups outside Linux.
type cgroupParent struct{}

func findCgroupParent() cgroupParent { return cgroupParent{} }

func (cgroupParent) ok() bool { return false }

func (cgroupParent) removeStale(string) {}

func (cgroupParent) create(string, int64, int) (*cgroup, error) { return nil, nil }

type cgroup struct{}

func (*cgroup) procs() []string               { return nil }
func (*cgroup) exceeded() (memory, pids bool) { return false, false }
func (*cgroup) kill()                         {}
func (*cgroup) remove()                       {}

func limitAddressSpace(int64) error { return nil }

func writeCgroup(string, string) error { return errors.New("no cgroups here") }
