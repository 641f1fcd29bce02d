package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/precog-ml/precog/jobs"
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
	fmt.Fprintf(w, "  padded shape per bucket: [≤%d, longest row ≤ %d], ≤%d tokens (rows sorted by token length, each bucket padded to its own longest row)\n",
		t.BucketRows, t.MaxLength, t.BucketTokens)
	if p := m.Spec().Pooling; p != "" && p != jobs.PoolingNone {
		n := m.Spec().Normalize
		if n == "" {
			n = jobs.NormalizeNone
		}
		where := "in the ONNX graph (a run returns one vector per row)"
		if why := m.GoPooling(); why != "" {
			where = "in Go: " + why
		}
		fmt.Fprintf(w, "  pooling %s over the attention mask, normalize %s, %s\n", p, n, where)
	}
}
