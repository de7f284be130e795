package control

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// checkText refuses a string field that Postgres could not store or that cannot be what
// the caller meant: a NUL byte (text columns refuse it), bytes that are not UTF-8, or more
// than max bytes (max 0: no bound). The message names the field and says what to change.
func checkText(field, v string, max int) error {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must not contain a NUL byte (\\u0000).", field)
	case !utf8.ValidString(v):
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must be valid UTF-8.", field)
	case max > 0 && len(v) > max:
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s is too long: at most %d bytes.", field, max)
	}
	return nil
}

// checkJSONText refuses a JSON object field (a failure's detail, an event's payload)
// whose keys or strings hold a NUL byte: jsonb refuses \u0000. raw is valid JSON.
func checkJSONText(field string, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must be a JSON object.", field)
	}
	if hasNUL(v) {
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must not contain a NUL byte (\\u0000) in any string.", field)
	}
	return nil
}

func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// cmpErr returns the first error that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
