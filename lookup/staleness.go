package lookup

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// StaleAgeHeader carries the age in seconds of a served record older than
// its job's max_staleness: precomputed predictions go stale silently, this
// makes it visible to the application.
const StaleAgeHeader = "X-Precog-Stale-Age"

// markStale sets StaleAgeHeader when the record's computed_at (raw JSON
// value) is older than spec's max_staleness.
func markStale(w http.ResponseWriter, spec *jobs.Spec, computedAt []byte, now time.Time) {
	if spec == nil || spec.MaxStaleness.Duration <= 0 {
		return
	}
	if age, ok := recordAge(computedAt, now); ok && age > spec.MaxStaleness.Duration {
		w.Header().Set(StaleAgeHeader, strconv.FormatInt(int64(age.Seconds()), 10))
	}
}

// recordAge is how old a record is by its computed_at (raw JSON value);
// false when it has none that parses.
func recordAge(computedAt []byte, now time.Time) (time.Duration, bool) {
	if len(computedAt) < 2 {
		return 0, false
	}
	var s string
	if raw := computedAt[1 : len(computedAt)-1]; computedAt[0] == '"' && computedAt[len(computedAt)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// The usual RFC 3339 text: no escapes to decode.
		s = string(raw)
	} else if err := json.Unmarshal(bytes.Clone(computedAt), &s); err != nil {
		// The clone keeps computedAt (and the record it points into) on
		// the caller's stack: json.Unmarshal would move it to the heap.
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, false
	}
	return now.Sub(t), true
}

// appendAge adds a found batch result's "age_seconds" (from computed_at)
// and, when the job has max_staleness, "stale": what X-Precog-Stale-Age
// tells single-key readers.
func appendAge(dst []byte, spec *jobs.Spec, computedAt []byte, now time.Time) []byte {
	age, ok := recordAge(computedAt, now)
	if !ok {
		return dst
	}
	dst = append(dst, `,"age_seconds":`...)
	dst = strconv.AppendFloat(dst, max(age, 0).Seconds(), 'f', 3, 64)
	if spec != nil && spec.MaxStaleness.Duration > 0 {
		dst = append(dst, `,"stale":`...)
		dst = strconv.AppendBool(dst, age > spec.MaxStaleness.Duration)
	}
	return dst
}
