package testgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GenerateOptions configures Generate, the whole test-data tree.
type GenerateOptions struct {
	RowsPerDate  int64    // rows in each dt= partition; default 10000
	FilesPerDate int      // default 2
	Dates        []string // default 2026-11-01, 2026-11-02
	Seed         uint64   // feature seed; default DefaultSeed
	Writer       Writer   // default WriterParquetGo
	Codec        Codec    // default CodecSnappy
}

// Generated lists what Generate wrote.
type Generated struct {
	Models  []string
	Data    *Result
	Jobs    []string
	Elapsed time.Duration
}

// Generate writes out/models/*.onnx (every model of All), the dataset
// out/data/users/dt=DATE/part-NNNNN.parquet (int64 user_id, f0…f15 and the
// `features` list, so every model input mapping works on it) and example
// job specs out/jobs/*.yaml pointing at them by absolute path.
func Generate(out string, o GenerateOptions) (*Generated, error) {
	start := time.Now()
	if o.RowsPerDate <= 0 {
		o.RowsPerDate = 10000
	}
	if o.FilesPerDate <= 0 {
		o.FilesPerDate = 2
	}
	if len(o.Dates) == 0 {
		o.Dates = []string{"2026-11-01", "2026-11-02"}
	}
	for _, d := range o.Dates {
		if _, err := time.Parse(time.DateOnly, d); err != nil {
			return nil, fmt.Errorf("generate: date %q: want YYYY-MM-DD", d)
		}
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g := &Generated{}
	modelsDir := filepath.Join(out, "models")
	for _, name := range Names() {
		p, err := Write(modelsDir, name)
		if err != nil {
			return nil, err
		}
		g.Models = append(g.Models, p)
	}
	dataDir := filepath.Join(out, "data", "users")
	perFile := (o.RowsPerDate + int64(o.FilesPerDate) - 1) / int64(o.FilesPerDate)
	g.Data, err = WriteDataset(dataDir, Dataset{
		Seed: o.Seed, Dim: 32, Layout: LayoutBoth, Dates: o.Dates,
		FilesPerDate: o.FilesPerDate, RowsPerFile: perFile, RowsPerGroup: min(perFile, 50000),
		Writer: o.Writer, Codec: o.Codec,
	})
	if err != nil {
		return nil, err
	}
	g.Jobs, err = WriteExampleJobs(filepath.Join(out, "jobs"), modelsDir, dataDir)
	if err != nil {
		return nil, err
	}
	g.Elapsed = time.Since(start)
	return g, nil
}

// WriteExampleJobs writes job specs (contract 1) for the generated models and
// data into dir and returns their paths.
func WriteExampleJobs(dir, modelsDir, dataDir string) ([]string, error) {
	cols := make([]string, 16)
	for i := range cols {
		cols[i] = FeatureColumn(i)
	}
	data := filepath.Join(dataDir, "dt={{.date}}", "*.parquet")
	jobs := map[string]string{
		"user-scores.yaml": fmt.Sprintf(`name: user-scores
source:
  parquet:
    path: %q
  key: %s
  rows_per_shard: 5000
model:
  path: %q
  inputs:
    features: { columns: [%s] }
  outputs:
    score: score
  batch_size: 1024
sinks:
  postgres: { dsn: "${DATABASE_URL}", table: user_scores, mode: upsert }
  parquet:  { path: %q }
retry: { max_attempts: 3 }
`, data, KeyColumn, filepath.Join(modelsDir, "ranker.onnx"), strings.Join(cols, ", "),
			filepath.Join(filepath.Dir(filepath.Dir(dataDir)), "out", "user_scores", "date={{.date}}")),
		"user-recs.yaml": fmt.Sprintf(`name: user-recs
schedule: "0 */4 * * *"
timezone: UTC
concurrency: forbid
source:
  parquet:
    path: %q
  key: %s
model:
  path: %q
  inputs:
    features: { columns: [%s] }
  outputs:
    topk_items: items
    topk_scores: scores
  batch_size: 512
sinks:
  redis: { addr: "${REDIS_ADDR}", namespace: recs, ttl: 48h }
retry: { max_attempts: 3 }
`, data, KeyColumn, filepath.Join(modelsDir, "recs.onnx"), strings.Join(cols, ", ")),
		"user-embeddings.yaml": fmt.Sprintf(`name: user-embeddings
source:
  parquet:
    path: %q
  key: %s
model:
  path: %q
  inputs:
    features: { column: %s }
  outputs:
    embedding: embedding
sinks:
  redis: { addr: "${REDIS_ADDR}", namespace: emb, ttl: 48h }
  postgres: { dsn: "${DATABASE_URL}", table: user_embeddings, mode: replace }
`, data, KeyColumn, filepath.Join(modelsDir, "embedder.onnx"), ListColumn),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	var paths []string
	for _, name := range []string{"user-scores.yaml", "user-recs.yaml", "user-embeddings.yaml"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(jobs[name]), 0o644); err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
