package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestEventsTailStripsEscapes: an event payload (JSON text, where C1 controls pass
// unescaped) prints without them.
func TestEventsTailStripsEscapes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	a := &app{io: IO{Out: &out}}
	payload, _ := json.Marshal(map[string]string{"reason": "boom\u009b2J\u009d0;pwned\u009c\u202etxet"})
	if err := a.printEvent(eventLine{ID: 1, Type: "task.failed", PlanID: "p", TaskID: "T1", Payload: payload, CreatedAt: time.Now()}, false); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\u009b\u009d\u009c\u202e") || !strings.Contains(s, "boom") {
		t.Errorf("printed %q", s)
	}
}
