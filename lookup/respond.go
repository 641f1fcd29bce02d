package lookup

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/precog-ml/precog/internal/jsontext"
	"github.com/precog-ml/precog/jobs"
)

// The hit path never decodes a stored record into Go values: the Redis
// value is already the JSON object of the record's fields plus
// model_version and computed_at (contract 2), so a response is built by
// copying its members into "values" and lifting those two out, in one pass
// over the bytes. This keeps a hit at a few allocations whatever the
// record's size (a top-50 list included).

// answer is one key's result inside the server: rec is a stored-record
// JSON object (the fields plus model_version and computed_at), source where
// it came from; an empty source is a miss.
type answer struct {
	rec    []byte
	source string
	// bad, when set, is the key's error: its stored record is corrupt
	// (an *errCorrupt). The chain stops there: the key is answered with
	// that error, never as a miss.
	bad error
}

// span is a member of a JSON object: [start, end) of its text, from the
// opening quote of its name to the end of its value.
type span struct{ start, end int }

// recordParts locates a stored record's members. mv and ca are the indexes
// in members of model_version and computed_at, -1 when absent.
type recordParts struct {
	members []span
	mv, ca  int
	mvVal   []byte // raw JSON value of model_version
	caVal   []byte
}

var errNotObject = errors.New("stored record is not a JSON object")

// isRecord reports whether rec is valid JSON and an object: what resolve
// checks of every stored record before it counts as an answer; a corrupt
// one is an error of its key (errCorrupt), never a miss.
func isRecord(rec []byte) bool {
	i := skipWS(rec, 0)
	return i < len(rec) && rec[i] == '{' && json.Valid(rec)
}

// splitRecord scans rec into its top-level members. rec must have passed
// isRecord: the scan trusts the syntax.
func splitRecord(rec []byte, buf []span) (recordParts, error) {
	p := recordParts{members: buf[:0], mv: -1, ca: -1}
	i := skipWS(rec, 0)
	if i >= len(rec) || rec[i] != '{' {
		return p, errNotObject
	}
	i = skipWS(rec, i+1)
	if i < len(rec) && rec[i] == '}' {
		return p, nil
	}
	for i < len(rec) {
		start := i
		nameEnd := skipString(rec, i)
		name := rec[i+1 : nameEnd-1]
		i = skipWS(rec, nameEnd)
		i = skipWS(rec, i+1) // the colon
		valStart := i
		i = skipValue(rec, i)
		m := len(p.members)
		p.members = append(p.members, span{start, i})
		// Later duplicates win, as encoding/json decodes them.
		switch string(name) {
		case jobs.ColModelVersion:
			p.mv, p.mvVal = m, rec[valStart:i]
		case jobs.ColComputedAt:
			p.ca, p.caVal = m, rec[valStart:i]
		}
		i = skipWS(rec, i)
		if i < len(rec) && rec[i] == ',' {
			i = skipWS(rec, i+1)
			continue
		}
		break
	}
	return p, nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// appendPrediction writes one result object: namespace (when not empty),
// key, found (when set), then the record's values, model_version,
// computed_at and source (for a hit). The field order and omissions are
// those of Prediction.
func appendPrediction(dst []byte, ns, key string, found *bool, a answer, p *recordParts) []byte {
	dst = append(dst, '{')
	if ns != "" {
		dst = append(dst, `"namespace":`...)
		dst = jsontext.AppendString(dst, ns)
		dst = append(dst, ',')
	}
	dst = append(dst, `"key":`...)
	dst = jsontext.AppendString(dst, key)
	if found != nil {
		if *found {
			dst = append(dst, `,"found":true`...)
		} else {
			dst = append(dst, `,"found":false`...)
		}
	}
	if a.source == "" {
		return append(dst, '}')
	}
	n := 0
	for i, m := range p.members {
		if i == p.mv || i == p.ca || isShadowed(a.rec, p, i) {
			continue
		}
		if n == 0 {
			dst = append(dst, `,"values":{`...)
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, a.rec[m.start:m.end]...)
		n++
	}
	if n > 0 {
		dst = append(dst, '}')
	}
	if isNonEmptyString(p.mvVal) {
		dst = append(dst, `,"model_version":`...)
		dst = append(dst, p.mvVal...)
	}
	if isNonEmptyString(p.caVal) {
		dst = append(dst, `,"computed_at":`...)
		dst = append(dst, p.caVal...)
	}
	dst = append(dst, `,"source":"`...)
	dst = append(dst, a.source...)
	return append(dst, `"}`...)
}

// isShadowed reports whether member i is an earlier duplicate of
// model_version or computed_at (a well-formed record has none; the check
// keeps a malformed one from leaking them into values).
func isShadowed(rec []byte, p *recordParts, i int) bool {
	m := p.members[i]
	name := rec[m.start:skipString(rec, m.start)]
	return string(name) == `"`+jobs.ColModelVersion+`"` || string(name) == `"`+jobs.ColComputedAt+`"`
}

// isNonEmptyString reports whether raw is a JSON string other than "".
func isNonEmptyString(raw []byte) bool {
	return len(raw) > 2 && raw[0] == '"'
}

// pgRecord renders a row of the job's Postgres view as a stored-record JSON
// object, columns in name order, so that every source answers through the
// same encoder.
func pgRecord(m map[string]any) ([]byte, string, error) {
	cols := make([]string, 0, len(m))
	for c := range m {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	b := []byte{'{'}
	for _, col := range cols {
		v := m[col]
		var err error
		switch col {
		case jobs.ColModelVersion:
			s, _ := v.(string)
			if s == "" {
				continue
			}
			v = s
		case jobs.ColComputedAt:
			t, ok := v.(time.Time)
			if !ok {
				continue
			}
			v = t.UTC().Format(time.RFC3339Nano)
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, col)
		b = append(b, ':')
		if b, err = pgJSON(b, v); err != nil {
			return nil, col, err
		}
	}
	return append(b, '}'), "", nil
}

// jsonContentType is shared by every response: setting the header map
// entry directly skips canonicalising the name and allocating the slice.
var jsonContentType = []string{"application/json"}

// bufPool recycles response buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeBody sends a JSON body built in b, with its length (so that a large
// batchGet answer is not sent chunked).
func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	writeBody(w, status, append(b, '\n'))
}
