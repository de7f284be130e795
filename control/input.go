package control

import (
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
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must be at most %d bytes.", field, max)
	}
	return nil
}
