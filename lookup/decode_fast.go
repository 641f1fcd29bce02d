package lookup

import (
	"bytes"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// fastPredict decodes the body nearly every live :predict sends,
// {"key":"…","inputs":{"name":[numbers…],…}} with plain strings (no
// escapes), in one pass: no validation scan first, no maps of raw members,
// no re-scan of each array. It was a third of the handler's CPU under load
// (profile of BenchmarkPredictLiveParallel).
//
// ok is false for any other body (an integer key, "columns" or "text", an
// escape, a duplicate name, an out-of-range number, malformed JSON…),
// which then takes decodePredict's general path: that path alone words
// the errors, so a client sees the same message whichever path ran.
// FuzzFastPredictMatchesGeneral checks that whatever this accepts, the
// general path decodes to the same request.
func fastPredict(body []byte) (req predictRequest, ok bool) {
	s := scanner{b: body}
	if !s.next('{') {
		return req, false
	}
	var seenKey, seenInputs bool
	for {
		name, ok := s.plainString()
		if !ok || !s.next(':') {
			return req, false
		}
		switch string(name) {
		case "key":
			k, ok := s.plainString()
			if !ok || seenKey || !utf8.Valid(k) {
				return req, false
			}
			req.Key, seenKey = string(k), true
		case "inputs":
			if seenInputs {
				return req, false
			}
			if req.Inputs, ok = s.numberArrays(); !ok {
				return req, false
			}
			seenInputs = true
		default:
			return req, false
		}
		if s.next(',') {
			continue
		}
		if !s.next('}') {
			return req, false
		}
		break
	}
	s.i = skipWS(s.b, s.i)
	return req, seenKey && s.i == len(s.b)
}

// scanner reads b from i on.
type scanner struct {
	b []byte
	i int
}

// next consumes c, after any whitespace, if it comes next.
func (s *scanner) next(c byte) bool {
	s.i = skipWS(s.b, s.i)
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString consumes a string without escapes or control characters
// and returns its bytes, quotes excluded.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// numberArrays consumes an object of number arrays, {"name":[1,2.5],…}.
func (s *scanner) numberArrays() (map[string][]float64, bool) {
	if !s.next('{') {
		return nil, false
	}
	out := make(map[string][]float64, 1)
	if s.next('}') {
		return out, true
	}
	for {
		name, ok := s.plainString()
		if !ok || !utf8.Valid(name) || !s.next(':') || !s.next('[') {
			return nil, false
		}
		if _, dup := out[string(name)]; dup {
			return nil, false
		}
		// One allocation of the right size: commas up to the array's end
		// (numbers hold neither).
		n := 1
		if end := bytes.IndexByte(s.b[s.i:], ']'); end >= 0 {
			n += bytes.Count(s.b[s.i:s.i+end], []byte{','})
		}
		fs := make([]float64, 0, n)
		if !s.next(']') {
			for {
				f, ok := s.number()
				if !ok {
					return nil, false
				}
				fs = append(fs, f)
				if s.next(',') {
					continue
				}
				if !s.next(']') {
					return nil, false
				}
				break
			}
		}
		out[string(name)] = fs
		if s.next(',') {
			continue
		}
		return out, s.next('}')
	}
}

// number consumes a JSON number (RFC 8259's grammar, checked here:
// strconv alone would also take "1_0", "0x1p3", "+1", "Inf") that is
// finite as a float64.
func (s *scanner) number() (float64, bool) {
	s.i = skipWS(s.b, s.i)
	b, j := s.b, s.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		j = skipDigits(b, j)
	default:
		return 0, false
	}
	if j < len(b) && b[j] == '.' {
		d := j + 1
		if j = skipDigits(b, d); j == d {
			return 0, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		d := j
		if j = skipDigits(b, d); j == d {
			return 0, false
		}
	}
	// ParseFloat keeps no reference to its argument (its errors copy it).
	f, err := strconv.ParseFloat(unsafe.String(&b[s.i], j-s.i), 64)
	if err != nil { // out of range: the general path words the error
		return 0, false
	}
	s.i = j
	return f, true
}

// skipDigits returns the index after the decimal digits from b[i].
func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
