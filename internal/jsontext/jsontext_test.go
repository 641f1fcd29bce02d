package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAppendString: each string is spelled as documented and reads back
// through encoding/json as itself (invalid UTF-8 as U+FFFD).
func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"t\tn\nr\r\x01\x1f", `"t\tn\nr\r\u0001\u001f"`},
		{"<a href='x'>&amp;</a>", `"<a href='x'>&amp;</a>"`},
		{"ls\u2028ps\u2029", "\"ls\u2028ps\u2029\""},
		{"Köln 日本 🙂", `"Köln 日本 🙂"`},
		{"bad\xffutf8\xc3", `"bad\ufffdutf8\ufffd"`},
	} {
		got := string(AppendString([]byte("x"), tc.in))
		if got != "x"+tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got[1:], tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got[1:]), &back); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", tc.in, got[1:], err)
		}
		if want := strings.ToValidUTF8(tc.in, "\uFFFD"); utf8.ValidString(tc.in) && back != want {
			t.Errorf("%q reads back as %q", tc.in, back)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("<&>\u2028\"\\\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, b, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q reads back as %q", s, back)
		}
	})
}
