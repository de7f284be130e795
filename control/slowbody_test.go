package control_test

import (
	"bufio"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
)

// TestBodyDeadlineCutsSlowBodiesButNotLongPolls: a body that stops arriving is answered
// 408 body_timeout and its connection closed once BodyTimeout passes; a claim that
// long-polls past BodyTimeout after sending its body waits its full time.
func TestBodyDeadlineCutsSlowBodiesButNotLongPolls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{BodyTimeout: 300 * time.Millisecond, MaxClaimWait: 1500 * time.Millisecond}})
	tok, _ := e.register()

	begin := time.Now()
	status, body := e.do("POST", "/v1/tasks/claim", tok, `{"wait_seconds": 1.5}`)
	if took := time.Since(begin); status != 204 || took < 1400*time.Millisecond {
		t.Errorf("a claim waiting 1.5 s with a 300 ms body deadline: %d %q after %v; want 204 after the full wait", status, body, took)
	}

	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	begin = time.Now()
	if _, err := conn.Write([]byte("POST /v1/plans HTTP/1.1\r\nHost: whilly\r\nAuthorization: Bearer " + e.admin +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"project\": ")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 408") {
		t.Fatalf("a stalled plan upload got %q (%v), want 408", line, err)
	}
	rest := make([]byte, 4096)
	for {
		if _, err := r.Read(rest); err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection of the stalled upload stayed open")
			}
			break
		}
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the stalled upload was cut off after %v, want about 300 ms", took)
	}
}
