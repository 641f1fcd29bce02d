package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/precog-ml/precog/jobs"
)

// textJob is one of the bench's text embedding jobs: titles (key id) →
// a text model, mean-pooled and l2-normalized → Parquet.
type textJob struct {
	Name      string // job name and the spec's file name
	Data      string // the titles' Parquet directory (writeTitles)
	Model     string
	Tokenizer string
	Out       string // the Parquet sink's path
	// Device is model.device ("": the default, cpu); Precision
	// model.precision ("": the default).
	Device    string
	Precision jobs.Precision
	// Batch is model.batch_size (0: left out, the device's choice).
	Batch int
	// TokenTypes: the model also takes token_type_ids (a BERT).
	TokenTypes bool
}

// writeTextJob writes j's spec under the scratch directory and returns
// its path.
func (h *harness) writeTextJob(j textJob) (string, error) {
	opt := ""
	if j.Device != "" {
		opt += fmt.Sprintf("  device: %s\n", j.Device)
	}
	if j.Precision != "" {
		opt += fmt.Sprintf("  precision: %s\n", j.Precision)
	}
	if j.Batch > 0 {
		opt += fmt.Sprintf("  batch_size: %d\n", j.Batch)
	}
	types := ""
	if j.TokenTypes {
		types = "    token_type_ids: { zeros_like: input_ids }\n"
	}
	y := fmt.Sprintf(`name: %s
source:
  parquet: { path: %q }
  key: id
  rows_per_shard: %d
model:
  path: %q
%s  inputs:
    input_ids:      { text: title, tokenizer: %q, max_length: %d }
    attention_mask: { mask_of: input_ids }
%s  outputs: { last_hidden_state: embedding }
  pooling: mean
  normalize: l2
sinks:
  parquet: { path: %q }
`, j.Name, j.Data, textRowsPerShard, j.Model, opt, j.Tokenizer, textMaxLen, types, j.Out)
	spec := filepath.Join(h.cfg.work, "jobs", j.Name+".yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		return "", err
	}
	return spec, os.WriteFile(spec, []byte(y), 0o644)
}
