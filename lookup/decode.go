package lookup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// badRequest is a client error answered with 400 and its message.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// batchGetRequest is the body of POST /v1/predictions/{ns}:batchGet.
type batchGetRequest struct {
	Keys []string
	// KeyErrs holds, per key, why that key alone is refused (empty, too
	// long, not a string or integer…); nil when the key is good. A bad
	// key gets its own "error" result and the others are answered.
	KeyErrs []error
}

// predictRequest is the body of POST /v1/predictions/{ns}:predict: a key and
// one row of inputs, keyed either by model input name (Inputs) or by source
// column name (Columns). Values are kept as the caller sent them (a number or
// an array of numbers) until the namespace's layout checks them.
type predictRequest struct {
	Key     string
	Inputs  map[string][]float64
	Columns map[string][]float64
	// ColumnScalar marks Columns entries the caller sent as a bare number.
	ColumnScalar map[string]bool
	// Text holds string columns by source column name (text models,
	// tensor(string) inputs): {"title": "…"}.
	Text map[string]string
}

// keyLimits bounds keys in every request.
type keyLimits struct {
	maxKeyLen int
	maxKeys   int
}

func (l keyLimits) checkKey(field, k string) error {
	if k == "" {
		return badf("%s: key is empty", field)
	}
	if len(k) > l.maxKeyLen {
		return badf("%s: key is %d bytes, limit %d", field, len(k), l.maxKeyLen)
	}
	if !utf8.ValidString(k) {
		return badf("%s: key is not valid UTF-8", field)
	}
	return nil
}

// decodeKey reads a JSON string or integer key.
func decodeKey(field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", badf("%s: missing", field)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badf("%s: %v", field, err)
		}
		return s, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return "", badf("%s: want a string or an integer, got %s", field, truncate(string(raw), 40))
		}
		return string(raw), nil
	default:
		return "", badf("%s: want a string or an integer, got %s", field, truncate(string(raw), 40))
	}
}

// strictObject decodes a JSON object into its fields, rejecting trailing data
// and duplicate or unknown fields (allowed lists the known ones).
func strictObject(body []byte, what string, allowed ...string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	// A valid body (the common case) decodes in one call; only an invalid
	// one needs the decoder's finer diagnosis (empty, trailing data).
	if json.Valid(body) {
		if isObject(body) {
			// The hot path (every :predict): a scan of the validated body,
			// no reflection and no second validation.
			obj, err := objectMembers(body, "")
			if err != nil {
				return nil, err
			}
			return obj, checkFields(obj, allowed)
		}
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, badf("malformed JSON: want a %s object: %v", what, err)
		}
		if obj == nil {
			return nil, badf("malformed JSON: want a %s object, got null", what)
		}
		return obj, checkFields(obj, allowed)
	}
	// Not valid JSON: every path below ends in an error.
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&obj); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, badf("malformed JSON: empty body, want a %s object", what)
		}
		return nil, badf("malformed JSON: %v", err)
	}
	if obj == nil {
		return nil, badf("malformed JSON: want a %s object, got null", what)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badf("malformed JSON: trailing data after the %s object", what)
	}
	return obj, checkFields(obj, allowed)
}

// isObject reports whether raw, valid JSON, is an object.
func isObject(raw []byte) bool {
	i := skipWS(raw, 0)
	return i < len(raw) && raw[i] == '{'
}

// objectMembers splits raw, a valid JSON object, into its members like
// json.Unmarshal into a map of raw values does, but with one scan and no
// reflection. A repeated member name, which encoding/json would accept
// with the last value winning, is an error: a client that sends
// {"keys":[1],"keys":[2]} has a bug worth hearing about. where prefixes
// the message ("" at the top level).
func objectMembers(raw []byte, where string) (map[string]json.RawMessage, error) {
	obj := make(map[string]json.RawMessage, 4)
	var err error
	i := skipWS(raw, 0) + 1 // after '{'
	for {
		i = skipWS(raw, i)
		if i >= len(raw) || raw[i] != '"' {
			return obj, err
		}
		end := skipString(raw, i)
		name := raw[i:end]
		var key string
		if bytes.IndexByte(name, '\\') < 0 && utf8.Valid(name) {
			key = string(name[1 : len(name)-1])
		} else if json.Unmarshal(name, &key) != nil {
			return nil, badf("malformed JSON: member name %s", truncate(string(name), 40))
		}
		i = skipWS(raw, skipWS(raw, end)+1) // past the colon
		vend := skipValue(raw, i)
		if _, dup := obj[key]; dup && err == nil {
			w := where
			if w != "" {
				w += ": "
			}
			err = badf("%sduplicate field %q (each field may appear once)", w, key)
		}
		obj[key] = json.RawMessage(raw[i:vend])
		i = skipWS(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i++
		}
	}
}

// arrayElems yields the elements of raw, a valid JSON array.
func arrayElems(raw []byte) func(yield func(int, []byte) bool) {
	return func(yield func(int, []byte) bool) {
		i := skipWS(raw, 0) + 1 // after '['
		for n := 0; ; n++ {
			i = skipWS(raw, i)
			if i >= len(raw) || raw[i] == ']' {
				return
			}
			end := skipValue(raw, i)
			if !yield(n, raw[i:end]) {
				return
			}
			i = skipWS(raw, end)
			if i < len(raw) && raw[i] == ',' {
				i++
			}
		}
	}
}

// checkFields rejects a field not in allowed: the first in sorted order
// when there are several, so that the same body always gets the same
// message.
func checkFields(obj map[string]json.RawMessage, allowed []string) error {
	var unknown []string
	for name := range obj {
		if !slices.Contains(allowed, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return badf("unknown field %q (want %s)", slices.Min(unknown), joinQuoted(allowed))
}

// jsonNumber parses e, one already-validated JSON value, as a number:
// strconv.ParseFloat is what encoding/json uses for a float64, without the
// reflection and re-validation of a json.Unmarshal per element.
func jsonNumber(e []byte) (float64, bool) {
	e = bytes.TrimSpace(e)
	if len(e) == 0 || (e[0] != '-' && (e[0] < '0' || e[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(e), 64)
	return f, err == nil
}

// decodeBatchGet parses and checks a batchGet body.
func decodeBatchGet(body []byte, lim keyLimits) (batchGetRequest, error) {
	obj, err := strictObject(body, "batchGet", "keys")
	if err != nil {
		return batchGetRequest{}, err
	}
	raw, ok := obj["keys"]
	if !ok {
		return batchGetRequest{}, badf(`field "keys": missing`)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return batchGetRequest{}, badf(`field "keys": want an array of keys (strings or integers)`)
	}
	if len(items) == 0 {
		return batchGetRequest{}, badf(`field "keys": empty`)
	}
	if len(items) > lim.maxKeys {
		return batchGetRequest{}, badf(`field "keys": %d keys, limit %d per request`, len(items), lim.maxKeys)
	}
	req := batchGetRequest{Keys: make([]string, len(items))}
	for i, it := range items {
		field := fmt.Sprintf("keys[%d]", i)
		k, err := decodeKey(field, it)
		if err == nil {
			err = lim.checkKey(field, k)
		} else {
			k = truncate(string(bytes.TrimSpace(it)), 40) // echo what was sent
		}
		if err != nil {
			if req.KeyErrs == nil {
				req.KeyErrs = make([]error, len(items))
			}
			req.KeyErrs[i] = err
			k = strings.ToValidUTF8(truncate(k, 40), "\uFFFD")
		}
		req.Keys[i] = k
	}
	return req, nil
}

// decodePredict parses a predict body. It checks JSON shape and types only;
// the namespace's layout checks names and lengths (checkPredict).
func decodePredict(body []byte, lim keyLimits) (predictRequest, error) {
	if req, ok := fastPredict(body); ok {
		if err := lim.checkKey(`field "key"`, req.Key); err != nil {
			return predictRequest{}, err
		}
		return req, nil
	}
	return decodePredictGeneral(body, lim)
}

// decodePredictGeneral is decodePredict for any body, and the one source
// of its error messages.
func decodePredictGeneral(body []byte, lim keyLimits) (predictRequest, error) {
	obj, err := strictObject(body, "predict", "key", "inputs", "columns", "text")
	if err != nil {
		return predictRequest{}, err
	}
	k, err := decodeKey(`field "key"`, obj["key"])
	if err != nil {
		return predictRequest{}, err
	}
	if err := lim.checkKey(`field "key"`, k); err != nil {
		return predictRequest{}, err
	}
	req := predictRequest{Key: k}
	if raw, ok := obj["text"]; ok {
		if req.Text, err = decodeText(raw); err != nil {
			return predictRequest{}, err
		}
	}
	rawIn, hasIn := obj["inputs"]
	rawCol, hasCol := obj["columns"]
	switch {
	case hasIn && hasCol:
		return predictRequest{}, badf(`give either "inputs" (by model input name) or "columns" (by source column name), not both`)
	case hasIn:
		req.Inputs, _, err = decodeNumbers("inputs", rawIn, false)
	case hasCol:
		req.Columns, req.ColumnScalar, err = decodeNumbers("columns", rawCol, true)
	}
	if err != nil {
		return predictRequest{}, err
	}
	return req, nil
}

// decodeNumbers reads an object whose values are arrays of numbers (or, when
// scalars is set, also bare numbers).
func decodeNumbers(field string, raw json.RawMessage, scalars bool) (map[string][]float64, map[string]bool, error) {
	// raw is part of a body json.Valid accepted: scanned, not re-decoded.
	if !isObject(raw) {
		return nil, nil, badf("field %q: want an object of number arrays", field)
	}
	m, err := objectMembers(raw, "field "+strconv.Quote(field))
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string][]float64, len(m))
	var isScalar map[string]bool
	// In name order, so that a body with several bad values always names
	// the same one.
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := bytes.TrimSpace(m[name])
		if scalars && len(v) > 0 && v[0] != '[' {
			f, ok := jsonNumber(v)
			if !ok {
				return nil, nil, badf("%s.%s: want a number or an array of numbers, got %s", field, name, truncate(string(v), 40))
			}
			out[name] = []float64{f}
			if isScalar == nil {
				isScalar = map[string]bool{}
			}
			isScalar[name] = true
			continue
		}
		if len(v) == 0 || v[0] != '[' {
			return nil, nil, badf("%s.%s: want an array of numbers, got %s", field, name, truncate(string(v), 40))
		}
		fs := make([]float64, 0, bytes.Count(v, []byte{','})+1)
		for i, e := range arrayElems(v) {
			f, ok := jsonNumber(e)
			if !ok {
				return nil, nil, badf("%s.%s[%d]: want a number, got %s", field, name, i, truncate(string(e), 40))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, nil, badf("%s.%s[%d]: not a finite number", field, name, i)
			}
			fs = append(fs, f)
		}
		out[name] = fs
	}
	return out, isScalar, nil
}

func joinQuoted(names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	var b bytes.Buffer
	for i, n := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
