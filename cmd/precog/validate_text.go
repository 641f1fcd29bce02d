package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/precog-ml/precog/runner/model"
)

// printText describes a text model's tokenizer and how its batches are
// padded, for `precog validate`.
func printText(w io.Writer, m *model.Model) {
	t, ok := m.Text()
	if !ok {
		return
	}
	fmt.Fprintf(w, "text input %s: columns %s, tokenizer %s, vocabulary %d, max_length %d\n",
		t.Input, strings.Join(t.Columns, "+"), t.Kind, t.VocabSize, t.MaxLength)
	fmt.Fprintf(w, "  padded shape per bucket: [≤%d, longest row ≤ %d] (rows sorted by token length, each bucket padded to its own longest row)\n",
		t.BucketRows, t.MaxLength)
	if p := m.Spec().Pooling; p != "" && p != "none" {
		n := m.Spec().Normalize
		if n == "" {
			n = "none"
		}
		fmt.Fprintf(w, "  pooling %s over the attention mask, normalize %s\n", p, n)
	}
}
