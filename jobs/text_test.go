package jobs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const textBase = `name: titles
source:
  parquet: { path: "data/*.parquet" }
  key: id
model:
  path: models/e5.onnx
  inputs:
    input_ids:      { text: title, tokenizer: models/tokenizer.json, max_length: 256 }
    attention_mask: { mask_of: input_ids }
    token_type_ids: { zeros_like: input_ids }
  outputs: { last_hidden_state: embedding }
  pooling: mean
  normalize: l2
sinks:
  parquet: { path: "out" }
`

// TestTextSpec reads contract 1's text form: text as one column or a list,
// the tokenizer path resolved against the spec's directory, pooling and
// normalize.
func TestTextSpec(t *testing.T) {
	s, err := Parse([]byte(textBase), "/jobs/titles.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := s.Model.Inputs["input_ids"]
	if !slices.Equal(in.Text, []string{"title"}) || in.Tokenizer != filepath.FromSlash("/jobs/models/tokenizer.json") || in.MaxLength != 256 {
		t.Fatalf("input_ids %+v", in)
	}
	if s.Model.Inputs["attention_mask"].MaskOf != "input_ids" || s.Model.Inputs["token_type_ids"].ZerosLike != "input_ids" || s.Model.Pooling != "mean" || s.Model.Normalize != "l2" {
		t.Fatalf("model %+v", s.Model)
	}
	s, err = Parse([]byte(strings.Replace(textBase, "text: title,", "text: [title, description],", 1)), "", nil, nil)
	if err != nil || !slices.Equal(s.Model.Inputs["input_ids"].Text, []string{"title", "description"}) {
		t.Fatalf("text list: %v, %+v", err, s)
	}
}

// TestTextSpecErrors: every mistake names its field.
func TestTextSpecErrors(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"text: title, tokenizer: models/tokenizer.json,", "text: title,", "model.inputs.input_ids.tokenizer: required for a text input"},
		{"{ mask_of: input_ids }", "{ mask_of: title }", `model.inputs.attention_mask.mask_of: "title" is not a text input`},
		{"{ zeros_like: input_ids }", "{ zeros_like: input_ids, columns: [a] }", "model.inputs.token_type_ids: give one of columns, column, text, mask_of or zeros_like"},
		{"pooling: mean", "pooling: avg", `model.pooling: "avg" is not mean, cls, max or none`},
		{"normalize: l2", "normalize: l1", `model.normalize: "l1" is not l2 or none`},
		{"max_length: 256", "max_length: -1", "model.inputs.input_ids.max_length: -1 is negative"},
		{"{ mask_of: input_ids }", "{ mask_of: input_ids, max_length: 3 }", "model.inputs.attention_mask.max_length: only a text input has a max_length"},
	} {
		y := strings.Replace(textBase, tc.old, tc.new, 1)
		if y == textBase {
			t.Fatalf("%q not in the base spec", tc.old)
		}
		_, err := Parse([]byte(y), "job.yaml", nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.new, err, tc.want)
		}
	}
}
