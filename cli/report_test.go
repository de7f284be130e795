package cli

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// An error is printed as one plain sentence: the store's error class ("conflict",
// "invalid request") is how the code tells errors apart, not words for people, however
// the error reached the command (wrapped, flattened by failf, or as the control plane's
// message).
func TestReportLeavesOffTheErrorClass(t *testing.T) {
	t.Parallel()
	ambiguous := fmt.Errorf("token prefix %q is ambiguous: it begins whilly_a_x and whilly_a_y; give more of it: %w", "whilly_a_", queue.ErrConflict)
	cases := []struct {
		err  error
		want string
	}{
		{ambiguous, `whilly: token prefix "whilly_a_" is ambiguous: it begins whilly_a_x and whilly_a_y; give more of it.` + "\n"},
		{failf("register: %v", fmt.Errorf("hostname must be 1 to 255 characters: %w", queue.ErrInvalid)), "whilly: register: hostname must be 1 to 255 characters.\n"},
		{fmt.Errorf("pause: %w", fmt.Errorf("plan p is DONE: only an active plan can be paused: %w", queue.ErrConflict)), "whilly: pause: plan p is DONE: only an active plan can be paused.\n"},
		{&client.Error{Status: 409, Code: "conflict", Message: "Plan p is DONE: only an active plan can be paused."}, "whilly: control plane answered 409: Plan p is DONE: only an active plan can be paused.\n"},
		{fmt.Errorf("plan nope: %w", queue.ErrNotFound), "whilly: plan nope: not found.\n"},
		{errors.New("the conflict"), "whilly: the conflict.\n"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		report(&b, c.err)
		if b.String() != c.want {
			t.Errorf("report(%v) =\n%q\nwant\n%q", c.err, b.String(), c.want)
		}
	}
}
