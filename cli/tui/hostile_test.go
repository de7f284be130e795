package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
)

// Plan names, task descriptions, errors, worker names and event payloads are written by
// whoever wrote the issue, the plan file or the agent's output. None of them reaches the
// terminal of whoever runs `whilly dashboard` as a control sequence: no clipboard write
// (OSC 52), no cleared screen, no retitled window, no bidi reordering.
func TestViewPrintsNoControlSequenceFromTheData(t *testing.T) {
	t.Parallel()
	const (
		osc52 = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07"
		clear = "\x1b[2J\x1b[H"
		c1    = "\u009b2J\u009d0;pwned\u009c"
		bidi  = "\u202etxet"
	)
	api := demoData()
	api.plans[0].Name = "Demo" + osc52 + " plan" + bidi
	api.tasks["demo"][0].Description = "Write" + clear + " the parser" + c1
	api.tasks["demo"][2].LastError = "agent" + osc52 + "_timeout"
	api.workers[0].Hostname = "box" + c1 + "/run-1"
	api.workers[0].Labels = []string{"gpu" + clear}
	m := newModel(t, api, "")
	settle(m, m.refreshAll())
	settle(m, m.refreshAll())
	m.Update(EventMsg{Event: client.Event{ID: 9, Type: "task.failed" + clear, PlanID: "demo", TaskID: "T3",
		Payload: []byte(`{"reason":"boom` + "\u009b2J" + `\u001b]0;t\u0007"}`), CreatedAt: t0.Add(-time.Second)}})
	m.Update(EventMsg{Event: client.Event{ID: 10, Type: "plan.paused", PlanID: "demo" + bidi, CreatedAt: t0}})

	v := m.View()
	if i := strings.IndexFunc(v, func(r rune) bool {
		return r == 0x1b || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
	}); i >= 0 {
		t.Fatalf("the view holds a control character at %d: %q", i, v[max(0, i-40):min(len(v), i+40)])
	}
	mustContain(t, v, "Demo plan", "box/run-1", "agent_timeout")
}
