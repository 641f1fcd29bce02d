package jobs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestNewReject: a sampled reject is printable UTF-8 of bounded size
// whatever the key, and a clipped position keeps its row.
func TestNewReject(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"user-1", "user-1"},
		{"", ""},
		{"ünïcødé ✓", "ünïcødé ✓"},
		{"a\x00b", `"a\x00b"`},
		{"\xff\xfe", `"\xff\xfe"`},
		{"line\nbreak", `"line\nbreak"`},
	} {
		if got := NewReject(1, c.key, "p row 1", "r").Key; got != c.want {
			t.Errorf("NewReject key %q = %q, want %q", c.key, got, c.want)
		}
	}
	huge := NewReject(3, "\xff"+strings.Repeat("é", 1<<20), strings.Repeat("dir/", 1000)+"part-7.parquet row 4242", strings.Repeat("why ", 1000))
	for name, f := range map[string]string{"key": huge.Key, "position": huge.Position, "reason": huge.Reason} {
		if len(f) > RejectFieldMax || !utf8.ValidString(f) || !strings.Contains(f, "…") {
			t.Errorf("%s of a huge reject: %d bytes, valid %v: %.60q", name, len(f), utf8.ValidString(f), f)
		}
	}
	if !strings.HasSuffix(huge.Position, "part-7.parquet row 4242") || huge.Shard != 3 {
		t.Errorf("clipped reject = %+v, want shard 3 and the position's row kept", huge)
	}
	if b, err := json.Marshal(huge); err != nil || strings.Contains(string(b), `\u0000`) || strings.Contains(string(b), `\ufffd`) {
		t.Errorf("JSON of a clipped reject: %v %.80s", err, b)
	}
}

func TestComparePositions(t *testing.T) {
	ordered := []string{"a.parquet row 2", "a.parquet row 9", "a.parquet row 10", "a.parquet row 100", "b.parquet row 1", "part-2.parquet row 0", "part-10.parquet row 0"}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ComparePositions(ordered[i], ordered[j]); got != want {
				t.Errorf("ComparePositions(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

// TestCapSample: at most RejectSampleCap entries, the first given, each
// stamped with the shard, ordered by position.
func TestCapSample(t *testing.T) {
	if got := CapSample(0, nil); got != nil {
		t.Errorf("CapSample of nothing = %v, want nil", got)
	}
	var in []Reject
	for row := 40; row > 0; row-- {
		in = append(in, Reject{Shard: 9, Key: fmt.Sprint(row), Position: fmt.Sprintf("f row %d", row), Reason: "r"})
	}
	got := CapSample(4, in)
	if len(got) != RejectSampleCap {
		t.Fatalf("CapSample kept %d, want %d", len(got), RejectSampleCap)
	}
	for i, r := range got {
		if want := fmt.Sprintf("f row %d", 21+i); r.Position != want || r.Shard != 4 {
			t.Errorf("CapSample[%d] = %+v, want shard 4 at %q", i, r, want)
		}
	}
}

// FuzzNewReject: whatever a bad row holds, the sampled reject the ledger
// stores is printable UTF-8 (a jsonb column takes it), bounded, and
// ComparePositions orders any two positions consistently.
func FuzzNewReject(f *testing.F) {
	f.Add("a\x00b", "part-0.parquet row 9", "null key", "part-0.parquet row 10")
	f.Add("\xff\xfe", strings.Repeat("é", 300), "NaN output", "")
	f.Add(strings.Repeat("k", 1<<12), "row 007", "duplicate key", "row 7")
	f.Fuzz(func(t *testing.T, key, position, reason, other string) {
		r := NewReject(3, key, position, reason)
		for name, v := range map[string]string{"key": r.Key, "position": r.Position, "reason": r.Reason} {
			if !utf8.ValidString(v) || len(v) > RejectFieldMax {
				t.Fatalf("%s %q: not valid UTF-8 of at most %d bytes", name, v, RejectFieldMax)
			}
			for _, c := range v {
				if unicode.IsControl(c) {
					t.Fatalf("%s %q holds control character %U", name, v, c)
				}
			}
		}
		if again := NewReject(3, r.Key, r.Position, r.Reason); again != r {
			t.Fatalf("NewReject is not idempotent: %+v then %+v", r, again)
		}
		if ab, ba := ComparePositions(position, other), ComparePositions(other, position); ab != -ba {
			t.Fatalf("ComparePositions(%q, %q) = %d but reversed = %d", position, other, ab, ba)
		}
		if c := ComparePositions(position, position); c != 0 {
			t.Fatalf("ComparePositions(%q, itself) = %d", position, c)
		}
	})
}
