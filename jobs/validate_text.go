package jobs

import "strconv"

// validateInputForm checks that an input uses exactly one form: columns,
// column, text (with its tokenizer), mask_of or zeros_like, and that the
// text forms are complete.
func (d *decoder) validateInputForm(m *ModelSpec, p string, in InputSpec) {
	forms := 0
	for _, set := range []bool{len(in.Columns) > 0, in.Column != "", len(in.Text) > 0, in.MaskOf != "", in.ZerosLike != ""} {
		if set {
			forms++
		}
	}
	switch {
	case forms == 0:
		d.fail(p, "needs columns: [..] (numeric or string columns stacked), column: NAME (one list column), text: COLUMN (tokenized text), mask_of: INPUT or zeros_like: INPUT")
		return
	case forms > 1 && len(in.Columns) > 0 && in.Column != "":
		d.fail(p, "give either columns or column, not both")
		return
	case forms > 1:
		d.fail(p, "give one of columns, column, text, mask_of or zeros_like")
		return
	}
	if len(in.Text) == 0 {
		if in.Tokenizer != "" {
			d.fail(p+".tokenizer", "only a text input has a tokenizer")
		}
		if in.MaxLength != 0 {
			d.fail(p+".max_length", "only a text input has a max_length")
		}
	}
	if len(in.Text) > 0 {
		for i, c := range in.Text {
			if c == "" {
				d.fail(p+".text["+strconv.Itoa(i)+"]", "column name must not be empty")
			}
		}
		if in.Tokenizer == "" {
			d.fail(p+".tokenizer", "required for a text input: the model's HuggingFace tokenizer.json")
		}
		if in.MaxLength < 0 {
			d.fail(p+".max_length", "%d is negative", in.MaxLength)
		}
	}
	for field, ref := range map[string]string{"mask_of": in.MaskOf, "zeros_like": in.ZerosLike} {
		if ref == "" {
			continue
		}
		other, ok := m.Inputs[ref]
		if !ok || len(other.Text) == 0 {
			d.fail(p+"."+field, "%q is not a text input of model.inputs", ref)
		}
	}
}

// validatePooling checks model.pooling and model.normalize.
func (d *decoder) validatePooling(m *ModelSpec) {
	if !m.Pooling.Valid() {
		d.fail("model.pooling", "%q is not mean, cls, max or none", m.Pooling)
	}
	if !m.Normalize.Valid() {
		d.fail("model.normalize", "%q is not l2 or none", m.Normalize)
	}
}
