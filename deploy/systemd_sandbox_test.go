package deploy_test

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// unitDirectives reads the [Service] sections of a unit and its drop-ins, in order: each
// directive's values; an empty assignment resets a directive, as systemd does.
func unitDirectives(bodies ...string) map[string][]string {
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(strings.Join(bodies, "\n")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			if k, v, ok := strings.Cut(line, "="); ok && v == "" {
				delete(out, k)
			} else if ok {
				out[k] = append(out[k], v)
			}
		}
	}
	return out
}

// The mounts systemd (252, Debian 12's) makes in a service's mount namespace for its
// sandboxing directives (src/core/namespace.c): read-only binds, and "inaccessible"
// nodes over files and directories. A directive that sets up no mount, or one that the
// worker must not set at all (refused below), is not here.
var (
	readOnlyMounts = map[string][]string{
		"ProtectKernelTunables": {"/proc/acpi", "/proc/apm", "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq",
			"/proc/kallsyms", "/proc/kcore", "/proc/latency_stats", "/proc/mtrr", "/proc/scsi", "/proc/sys",
			"/proc/sysrq-trigger", "/proc/timer_list", "/sys"},
		"ProtectControlGroups": {"/sys/fs/cgroup"},
	}
	inaccessibleMounts = map[string][]string{
		"ProtectKernelLogs":    {"/proc/kmsg", "/dev/kmsg"},
		"ProtectKernelModules": {"/lib/modules", "/usr/lib/modules"},
		"ProtectHome":          {"/home", "/root", "/run/user"},
	}
	// Directives the emulation knows to make no mount that matters to bubblewrap.
	noMounts = []string{"NoNewPrivileges", "CapabilityBoundingSet", "AmbientCapabilities", "ProtectClock",
		"ProtectHostname", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "RemoveIPC",
		"RestrictAddressFamilies", "SystemCallArchitectures", "Delegate"}
	// Directives that break bubblewrap (or the agents it runs) whatever the emulation says.
	refused = map[string]string{
		"RestrictNamespaces":     "bubblewrap makes user, pid, ipc, uts and network namespaces",
		"SystemCallFilter":       "bubblewrap needs mount, pivot_root and unshare, which @system-service lacks",
		"ProtectProc":            "a /proc mounted with hidepid is not fully visible: bubblewrap cannot mount its own",
		"ProcSubset":             "a /proc mounted with subset=pid is not fully visible: bubblewrap cannot mount its own",
		"MemoryDenyWriteExecute": "Node (Claude Code, Codex) compiles to executable memory",
		"PrivateUsers":           "the worker's box maps its own user in a user namespace of its own",
		"PrivateNetwork":         "the agent reaches its model API",
		"RestrictFileSystems":    "bubblewrap mounts proc and tmpfs",
	}
	sandboxing = regexp.MustCompile(`^(Protect|Private|Restrict|ReadOnly|ReadWrite|Inaccessible|TemporaryFileSystem|Bind|ProcSubset|SystemCall|MemoryDeny|NoExec|ExecPaths|MountAPIVFS|Delegate)`)
)

// restrictionScript returns the shell commands that make, in a fresh mount namespace,
// the mounts that unit's directives make (worker copied to /mnt/whilly-worker, HOME
// /mnt/home), and lists the directives it cannot stand for.
func restrictionScript(t *testing.T, worker string, dirs map[string][]string) (script []string, problems []string) {
	t.Helper()
	// The worker, its HOME and the inaccessible nodes live on a tmpfs of the namespace's
	// own, out of the way of the mounts below (PrivateTmp hides /tmp).
	const stage = "/mnt"
	if fi, err := os.Stat(stage); err != nil || !fi.IsDir() {
		t.Fatalf("%s is not a directory: %v", stage, err)
	}
	empty, emptyFile := stage+"/inaccessible", stage+"/inaccessible-file"
	script = append(script, "mount -n -t tmpfs -o mode=755 tmpfs "+stage,
		"cp "+worker+" "+stage+"/whilly-worker", "mkdir -m 777 "+stage+"/home",
		"mkdir -m 0 "+empty, "touch "+emptyFile, "chmod 0 "+emptyFile)
	yes := func(k string) bool { // set, to anything but its default
		v := dirs[k]
		return len(v) > 0 && !slices.Contains([]string{"no", "false", "0", "", "default", "all"}, v[len(v)-1])
	}
	add := func(format string, args ...any) { script = append(script, fmt.Sprintf(format, args...)) }
	for _, k := range slices.Sorted(maps.Keys(dirs)) {
		if why, bad := refused[k]; bad && yes(k) {
			problems = append(problems, k+": "+why)
			continue
		}
		_, ro := readOnlyMounts[k]
		_, ina := inaccessibleMounts[k]
		_, bad := refused[k]
		if sandboxing.MatchString(k) && !ro && !ina && !bad && !slices.Contains(noMounts, k) &&
			k != "ProtectSystem" && k != "PrivateTmp" && k != "PrivateDevices" {
			problems = append(problems, k+": this test does not know the mounts it makes; teach it")
		}
	}
	switch v := slices.Concat(dirs["ProtectSystem"], []string{"no"})[0]; v {
	case "strict":
		add("mount -n -o remount,bind,ro /")
	case "full":
		add("mount -n -o remount,bind,ro /usr; mount -n -o remount,bind,ro /boot 2>/dev/null || true; mount -n --bind /etc /etc; mount -n -o remount,bind,ro /etc")
	case "yes", "true":
		add("mount -n --bind /usr /usr; mount -n -o remount,bind,ro /usr")
	}
	if yes("PrivateTmp") {
		add("mount -n -t tmpfs tmpfs /tmp; mount -n -t tmpfs tmpfs /var/tmp")
	}
	if yes("PrivateDevices") {
		// A tmpfs /dev holding only the harmless devices, as systemd makes it.
		add("d=$(mktemp -d); mount -n -t tmpfs -o mode=755 tmpfs $d; mkdir $d/pts $d/shm")
		add("for n in null zero full random urandom tty; do touch $d/$n; mount -n --bind /dev/$n $d/$n; done")
		add("mount -n --move $d /dev")
	}
	for _, k := range slices.Sorted(maps.Keys(readOnlyMounts)) {
		if yes(k) {
			for _, p := range readOnlyMounts[k] {
				add("if [ -e %[1]s ]; then mount -n --rbind %[1]s %[1]s && mount -n -o remount,bind,ro %[1]s; fi", p)
			}
		}
	}
	for _, k := range []string{"ProtectHome", "ProtectKernelLogs", "ProtectKernelModules"} {
		if yes(k) {
			for _, p := range inaccessibleMounts[k] {
				add("if [ -d %[1]s ]; then mount -n --bind %[2]s %[1]s; elif [ -e %[1]s ]; then mount -n --bind %[3]s %[1]s; fi", p, empty, emptyFile)
			}
		}
	}
	return script, problems
}

// buildWorker builds whilly-worker from this repository.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "whilly-worker")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/whilly-worker")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/whilly-worker: %v\n%s", err, out)
	}
	return bin
}

// requireSandboxTools skips (fails under WHILLY_TEST_SANDBOX=require) where the test
// cannot make mount namespaces or lacks bubblewrap.
func requireSandboxTools(t *testing.T) {
	t.Helper()
	var missing []string
	for _, tool := range []string{"bwrap", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
		t.Fatalf("WHILLY_TEST_SANDBOX=require, but this machine lacks %v", missing)
	}
	t.Skipf("needs %v", missing)
}

// runWorkerUnder starts the real whilly-worker as an unprivileged user, with no new
// privileges, in a mount namespace restricted as the unit's directives restrict it: it
// checks its sandbox first, and stops at the next step (no agent CLI, or no control plane).
func runWorkerUnder(t *testing.T, worker string, dirs map[string][]string) string {
	t.Helper()
	script, problems := restrictionScript(t, worker, dirs)
	for _, p := range problems {
		t.Errorf("the unit sets %s", p)
	}
	script = append(script, fmt.Sprintf("exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs "+
		"env -i PATH=/usr/bin:/bin HOME=/mnt/home WHILLY_SANDBOX=bwrap /mnt/whilly-worker --connect http://127.0.0.1:9 --agent claude"))
	cmd := exec.CommandContext(t.Context(), "unshare", "--mount", "--propagation", "private", "sh", "-ec", strings.Join(script, "\n"))
	out, _ := cmd.CombinedOutput() // it always stops with 2 here; what it says decides
	return string(out)
}

// TestWorkerUnitSandboxWorks runs the worker's own sandbox check under the mounts the
// worker unit's hardening makes (systemd is not PID 1 here: the test makes them itself).
// systemd's ProtectKernelTunables= and ProtectKernelLogs= cover parts of /proc, and the
// kernel lets a user namespace mount a fresh /proc only where the whole of /proc is
// visible: bubblewrap then fails with "Can't mount proc".
func TestWorkerUnitSandboxWorks(t *testing.T) {
	t.Parallel()
	requireSandboxTools(t)
	worker := buildWorker(t)
	dirs := unitDirectives(readFile(t, "systemd/whilly-worker@.service"))
	if out := runWorkerUnder(t, worker, dirs); !strings.Contains(out, "sandbox works") || strings.Contains(out, "does not work here") {
		t.Errorf("whilly-worker under the unit's restrictions:\n%s", out)
	}
	// serve's planner and TRIZ box the agent too: the serve unit with its planner drop-in.
	serve := unitDirectives(readFile(t, "systemd/whilly-serve.service"), readFile(t, "systemd/whilly-serve-planner.conf"))
	if out := runWorkerUnder(t, worker, serve); !strings.Contains(out, "sandbox works") || strings.Contains(out, "does not work here") {
		t.Errorf("the sandbox under whilly-serve.service with whilly-serve-planner.conf:\n%s", out)
	}

	// The emulation does restrict: with the directive the unit had, bubblewrap fails,
	// and the worker says why and what to do, not to install bubblewrap.
	dirs["ProtectKernelTunables"] = []string{"yes"}
	out := runWorkerUnder(t, worker, dirs)
	if !strings.Contains(out, "Can't mount proc") {
		t.Fatalf("with ProtectKernelTunables=yes the box should fail on /proc:\n%s", out)
	}
	if strings.Contains(out, "install bubblewrap") || !strings.Contains(out, "ProtectKernelTunables") {
		t.Errorf("the worker's advice does not name the cause:\n%s", out)
	}
}
