package sinks

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key any sink or the lookup API holds: Postgres
// B-tree index entries cap near 2.7 kB, and the API bounds a key in a URL.
// The one source of truth for the runner's key check and the API's limit.
const MaxKeyBytes = 512

// CheckKey returns why a text key cannot be stored ("" when it can): empty,
// longer than MaxKeyBytes, containing NUL, or not valid UTF-8. Rows with such
// keys are rejected before any write.
func CheckKey(k string) string {
	switch {
	case k == "":
		return "empty key"
	case len(k) > MaxKeyBytes:
		return fmt.Sprintf("key is %d bytes, more than the %d a sink or the lookup API can hold", len(k), MaxKeyBytes)
	case strings.IndexByte(k, 0) >= 0:
		return "key contains a NUL byte"
	case !utf8.ValidString(k):
		return "key is not valid UTF-8"
	}
	return ""
}
