package jobs

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// RejectSampleCap is how many rejected rows of one shard the ledger keeps:
// enough for `status` to say why rows were rejected, wherever the shard
// ran, without the ledger growing with bad data. The full list stays in
// the reject files of the worker that ran the shard.
const RejectSampleCap = 20

// RejectFieldMax bounds each field of a sampled reject in bytes, so that a
// 1 MiB bad key cannot bloat the ledger.
const RejectFieldMax = 256

// Reject is one rejected row as the ledger keeps it in a shard's sample.
type Reject struct {
	Shard int `json:"shard"`
	// Key is the row's key: escaped as a Go string literal when it is not
	// printable UTF-8, clipped to RejectFieldMax bytes.
	Key string `json:"key"`
	// Position names the file (or query) and row: "part-0.parquet row 12".
	Position string `json:"position"`
	Reason   string `json:"reason"`
}

// NewReject makes a sample entry safe to store: every field valid,
// printable UTF-8 (a jsonb column refuses invalid UTF-8 and NUL) of at most
// RejectFieldMax bytes. A clipped field keeps its head and tail, so a
// position still ends with its row number.
func NewReject(shard int, key, position, reason string) Reject {
	return Reject{Shard: shard, Key: clipField(printable(key)), Position: clipField(printable(position)), Reason: clipField(printable(reason))}
}

// printable returns s unchanged when it is valid UTF-8 without control
// characters, else s quoted with Go escapes (as %q writes it).
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// clipField cuts s to at most RejectFieldMax bytes on rune boundaries,
// keeping its head and its tail around "…".
func clipField(s string) string {
	if len(s) <= RejectFieldMax {
		return s
	}
	const ellipsis = "…"
	half := (RejectFieldMax - len(ellipsis)) / 2
	head := half
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - half
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + ellipsis + s[tail:]
}

// CapSample is the sample a ledger stores for one shard's commit: at most
// RejectSampleCap entries, each made safe by NewReject and stamped with the
// shard, ordered by position (row numbers compared as numbers). Both
// ledgers apply it, so a caller cannot bloat the ledger.
func CapSample(shard int, sample []Reject) []Reject {
	if len(sample) == 0 {
		return nil
	}
	out := make([]Reject, 0, min(len(sample), RejectSampleCap))
	for _, r := range sample[:min(len(sample), RejectSampleCap)] {
		out = append(out, NewReject(shard, r.Key, r.Position, r.Reason))
	}
	slices.SortStableFunc(out, func(a, b Reject) int { return ComparePositions(a.Position, b.Position) })
	return out
}

// ComparePositions orders reject positions as people read them: runs of
// digits compare as numbers, so "part-0.parquet row 9" comes before
// "part-0.parquet row 10".
func ComparePositions(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		ra, sa := utf8.DecodeRuneInString(a)
		rb, sb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		a, b = a[sa:], b[sb:]
	}
	return cmp.Compare(len(a), len(b))
}

// digits is the length of s's leading run of ASCII digits.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// SafeRejects is what a ledger stores of one shard's rejects: at most n
// entries (none when n <= 0), each made safe by NewReject and stamped with
// the shard, ordered by position; the first rows by position are kept.
func SafeRejects(shard int, rs []Reject, n int) []Reject {
	if n <= 0 || len(rs) == 0 {
		return nil
	}
	out := make([]Reject, len(rs))
	for i, r := range rs {
		out[i] = NewReject(shard, r.Key, r.Position, r.Reason)
	}
	slices.SortStableFunc(out, func(a, b Reject) int { return ComparePositions(a.Position, b.Position) })
	return out[:min(n, len(out))]
}
