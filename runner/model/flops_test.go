package model

import (
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestEstimateFLOPs holds the estimate to the test models' layer sizes: 2
// FLOPs per weight and bias of each Gemm/MatMul.
func TestEstimateFLOPs(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  int64
	}{
		{"ranker", 2 * (16*64 + 64 + 64*1)},
		{"embedder", 2 * (32*128 + 128 + 128*64 + 64)},
		{"heavy", 2 * (16*1024 + 1024 + 2*(1024*1024+1024) + 1024)},
	} {
		data, err := readModelFile(specFor(t, tc.model).Path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := estimateFLOPs(data)
		if err != nil {
			t.Fatal(err)
		}
		// The last layer's 1-element bias is not a weight (n > 1).
		if got != tc.want {
			t.Errorf("%s: %d FLOPs per row, want %d", tc.model, got, tc.want)
		}
	}
	if _, err := estimateFLOPs([]byte{0xff, 0xff}); err == nil {
		t.Error("garbage accepted")
	}
}

func TestSmallModelWarning(t *testing.T) {
	for _, tc := range []struct {
		model, device string
		warn          bool
	}{
		{"ranker", "cuda:0", true},
		{"embedder", "cuda:1", true},
		{"heavy", "cuda:0", false},
		{"ranker", "cpu", false},
		{"ranker", "", false},
	} {
		spec := specFor(t, tc.model)
		spec.Device = tc.device
		msg, err := SmallModelWarning(spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := msg != ""; got != tc.warn {
			t.Errorf("%s on %q: warning %q, want one: %v", tc.model, tc.device, msg, tc.warn)
		}
		if tc.warn && !strings.Contains(msg, tc.device) {
			t.Errorf("warning %q does not name %s", msg, tc.device)
		}
	}
	// A text model runs its per-token FLOPs over up to max_length tokens.
	spec := jobs.ModelSpec{Inputs: map[string]jobs.InputSpec{
		"input_ids": {Text: jobs.TextColumns{"title"}, MaxLength: 128},
		"mask":      {MaskOf: "input_ids"},
	}}
	if got := rowsOfTokens(spec); got != 128 {
		t.Errorf("tokens per row %d, want 128", got)
	}
	spec.Inputs["input_ids"] = jobs.InputSpec{Text: jobs.TextColumns{"title"}}
	if got := rowsOfTokens(spec); got != jobs.DefaultMaxLength {
		t.Errorf("tokens per row %d, want the default %d", got, jobs.DefaultMaxLength)
	}
}
