package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// The box's init is this program run again inside the box (bound at boxInit):
//
//	init __whilly_sandbox_init [--proxy SOCKET] -- EXECUTABLE ARGS…
//
// With --proxy it listens on a loopback port of the box's network namespace, bridges each
// connection to the worker's proxy at SOCKET, and points the agent's HTTP(S)_PROXY at that
// port: Node-based CLIs (Claude Code, Codex's launcher) speak HTTP proxies over TCP, not
// over unix sockets. It runs the agent as its child, passes on SIGTERM and SIGINT, and
// exits with the agent's status. The pid namespace ends with it, and every process the
// agent left behind is killed.
const (
	initArg     = "__whilly_sandbox_init"
	probeArg    = "--probe"
	probeAnswer = "whilly-sandbox-ok"
)

// HandleInit runs the box's init and exits when this process was started as one; else it
// returns at once. Every main that runs agents (whilly, whilly-worker, and the TestMain
// of tests that run boxes) calls it first thing.
func HandleInit() {
	if len(os.Args) < 2 || os.Args[1] != initArg {
		return
	}
	os.Exit(runInit(os.Args[2:]))
}

func runInit(args []string) int {
	if len(args) == 1 && args[0] == probeArg {
		fmt.Println(probeAnswer)
		return 0
	}
	var sock string
	if len(args) >= 2 && args[0] == "--proxy" {
		sock, args = args[1], args[2:]
	}
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "whilly sandbox init: usage: init [--proxy SOCKET] -- EXECUTABLE ARGS…")
		return 125
	}
	argv := args[1:]
	env := os.Environ()
	if sock != "" {
		ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(os.Stderr, "whilly sandbox init: listen for the proxy bridge: %v\n", err)
			return 125
		}
		go bridge(ln, sock)
		u := "http://" + ln.Addr().String()
		for _, n := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
			env = append(env, n+"="+u)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec,noctx // the agent whilly was asked to run; it ends when it exits
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "whilly sandbox init: start %s: %v\n", argv[0], err)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			return 127
		}
		return 126
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 125
}

// bridge connects each loopback connection to the worker's proxy socket.
func bridge(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			up, err := (&net.Dialer{}).DialContext(context.Background(), "unix", sock)
			if err != nil {
				return
			}
			defer func() { _ = up.Close() }()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(up, c)
				closeWrite(up)
				close(done)
			}()
			_, _ = io.Copy(c, up)
			closeWrite(c)
			<-done
		}()
	}
}
