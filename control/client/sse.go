package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ErrStreamClosed is returned by StreamEvents when the server ends the stream.
var ErrStreamClosed = errors.New("event stream closed by the server")

// maxEventBytes bounds one server-sent event (its data lines together).
const maxEventBytes = 8 << 20

// StreamEvents follows GET /v1/events/stream (of one plan when planID is set), replaying
// the events after lastEventID first (from now when it is 0 or less), and calls fn for
// each event in order. It returns fn's error, ctx's error, or ErrStreamClosed when the
// server ends the stream; reconnecting — with the id of the last event fn saw — is the
// caller's business.
func (c *Client) StreamEvents(ctx context.Context, planID string, lastEventID int64, fn func(Event) error) error {
	q := url.Values{}
	if planID != "" {
		q.Set("plan_id", planID)
	}
	var h http.Header
	if lastEventID > 0 {
		h = http.Header{"Last-Event-Id": {strconv.FormatInt(lastEventID, 10)}}
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/events/stream", q, nil, "text/event-stream", h)
	if err != nil {
		return fmt.Errorf("open event stream: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // the stream is over: a close error changes nothing
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("open event stream: the server answered %q, not text/event-stream", ct)
	}
	err = readSSE(resp.Body, func(f frame) error {
		if f.data == "" {
			return nil
		}
		var ev Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			return fmt.Errorf("decode event %s: %w", f.id, err)
		}
		return fn(ev)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		return ErrStreamClosed
	}
	return err
}

// frame is one dispatched server-sent event.
type frame struct {
	id, event, data string
}

// readSSE parses the text/event-stream format (comments, id, event, multi-line data) and
// calls fn per dispatched event. It returns nil at the end of the stream.
func readSSE(r io.Reader, fn func(frame) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var (
		f       frame
		data    strings.Builder
		hasData bool
	)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData {
				f.data = data.String()
				if err := fn(f); err != nil {
					return err
				}
			}
			f, hasData = frame{}, false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue // comment: keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			f.id = value
		case "event":
			f.event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
			if data.Len() > maxEventBytes {
				return fmt.Errorf("read event stream: an event is larger than %d bytes", maxEventBytes)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read event stream: %w", err)
	}
	return nil
}
