package lookup

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Live inference for text models and tensor(string) inputs: a predict
// request gives string columns by source column name,
// {"key": "p1", "text": {"title": "blue running shoes"}}; the model
// tokenizes and batches them as the batch job does, so a live embedding
// equals the stored one.

// decodeText reads the "text" object: source column → string.
func decodeText(raw json.RawMessage) (map[string]string, error) {
	if !isObject(raw) {
		return nil, badf(`field "text": want an object of strings by source column name`)
	}
	m, err := objectMembers(raw, `field "text"`)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for name, v := range m {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, badf("text.%s: want a string, got %s", name, truncate(string(v), 40))
		}
		out[name] = s
	}
	return out, nil
}

// hasNumeric reports whether any column is numeric (given in "inputs" or
// "columns").
func (l *layout) hasNumeric() bool {
	for _, c := range l.cols {
		if !c.text {
			return true
		}
	}
	return false
}

// textFromPredict fills r's text columns from the request's "text" object.
func (l *layout) textFromPredict(req predictRequest, r *row) error {
	var names []string
	for _, c := range l.cols {
		if c.text {
			names = append(names, c.name)
		}
	}
	if len(names) == 0 {
		if req.Text != nil {
			return badf(`field "text": the model has no text or string inputs`)
		}
		return nil
	}
	for name := range req.Text {
		if i, ok := l.byCol[name]; !ok || !l.cols[i].text {
			return badf("text.%s: not a text column of the model spec (have: %s)", name, strings.Join(names, ", "))
		}
	}
	r.strs = make([]string, len(l.cols))
	for i, c := range l.cols {
		if !c.text {
			continue
		}
		s, ok := req.Text[c.name]
		if !ok {
			return badf("text.%s: missing (text columns: %s)", c.name, strings.Join(names, ", "))
		}
		r.strs[i] = s
	}
	return nil
}

// textFromFeatures fills r's text columns from a features-table row.
func (l *layout) textFromFeatures(key string, feats map[string]any, r *row) error {
	r.strs = make([]string, len(l.cols))
	for i, c := range l.cols {
		if !c.text {
			continue
		}
		s, ok := feats[c.name].(string)
		if !ok {
			return fmt.Errorf("feature %q of key %q is NULL or not text", c.name, key)
		}
		r.strs[i] = s
	}
	return nil
}

// hasText reports whether the layout has text columns.
func hasText(l *layout) bool {
	for _, c := range l.cols {
		if c.text {
			return true
		}
	}
	return false
}
