package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

// Shape of the text section: a 384-wide embedding model (realistic
// per-token cost), titles truncated at textMaxLen tokens, shards of
// textRowsPerShard rows.
const (
	textWidth        = 384
	textMaxLen       = 128
	textRowsPerShard = 50_000
	// textSample is the rows the in-process measurements loop over (the
	// corpus is periodic, so a prefix has its length distribution).
	textSample = 16 * batchSize
)

// titleWords are the words titles are made of: ASCII, accents, CJK, emoji.
var titleWords = []string{"blue", "shoe", "Café", "naïve", "東京", "😀", "usb-c", "cable", "wireless", "headset",
	"the", "quick", "fox", "Résumé", "iPhone", "stainless", "steel", "water", "bottle", "organic", "cotton", "t-shirt"}

// title is row r's title: most are 2 to 6 words, every 10th a long one (20
// to 69 words, some past max_length): a length-skewed corpus.
func title(r int) string {
	k := 2 + r%5
	if r%10 == 3 {
		k = 20 + r%50
	}
	var b strings.Builder
	for j := range k {
		if j > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(titleWords[(r*7+j*3)%len(titleWords)])
	}
	return b.String()
}

var titleSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "title", Type: arrow.BinaryTypes.String},
}, nil)

// titleBatch is rows [from, to) as an Arrow batch.
func titleBatch(from, to int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, titleSchema)
	defer b.Release()
	for r := from; r < to; r++ {
		b.Field(0).(*array.Int64Builder).Append(int64(r))
		b.Field(1).(*array.StringBuilder).Append(title(r))
	}
	return b.NewRecordBatch()
}

// writeTitles writes n titled rows as Parquet files of textRowsPerShard rows.
func writeTitles(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy))
	for f, lo := 0, 0; lo < n; f, lo = f+1, lo+textRowsPerShard {
		rec := titleBatch(lo, min(lo+textRowsPerShard, n))
		tbl := array.NewTableFromRecords(titleSchema, []arrow.RecordBatch{rec})
		fh, err := os.Create(filepath.Join(dir, fmt.Sprintf("part-%05d.parquet", f)))
		if err == nil {
			// WriteTable closes the file when it succeeds.
			if err = pqarrow.WriteTable(tbl, fh, 10_000, props, pqarrow.DefaultWriterProps()); err != nil {
				fh.Close()
			}
		}
		tbl.Release()
		rec.Release()
		if err != nil {
			return fmt.Errorf("titles %s: %w", dir, err)
		}
	}
	return nil
}

// text is issue 22's section: tokenization against the tokenizer alone,
// length bucketing against padding to max_length, and a text embedding
// job against raw ONNX Runtime on the same padded batches.
func (h *harness) text(ctx context.Context) (*section, error) {
	n := int(h.cfg.textRows)
	s := &section{Title: fmt.Sprintf("Text: titles (most 2–6 words, every 10th 20–69) → WordPiece → a %d-wide text_embedder (last_hidden_state, mean pooling, l2), max_length %d", textWidth, textMaxLen)}
	dir := filepath.Join(h.cfg.work, "text")
	modelPath, err := testgen.NewTextEmbedderSized(testgen.DefaultSeed, textWidth, textWidth).Write(filepath.Join(dir, "model"))
	if err != nil {
		return s, err
	}
	tokPath := filepath.Join(dir, "model", "tokenizer.json")
	mspec := jobs.ModelSpec{
		Path: modelPath,
		Inputs: map[string]jobs.InputSpec{
			"input_ids":      {Text: jobs.TextColumns{"title"}, Tokenizer: tokPath, MaxLength: textMaxLen},
			"attention_mask": {MaskOf: "input_ids"},
		},
		Outputs: map[string]string{"last_hidden_state": "embedding"}, Pooling: jobs.PoolingMean, Normalize: jobs.NormalizeL2, BatchSize: batchSize,
	}
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		return s, err
	}
	var recs []arrow.RecordBatch
	for lo := 0; lo < textSample; lo += batchSize {
		recs = append(recs, titleBatch(lo, lo+batchSize))
	}
	defer release(recs)
	if err := h.tokenization(s, mspec, tok, recs); err != nil {
		return s, fmt.Errorf("tokenization: %w", err)
	}
	if err := h.bucketing(ctx, s, mspec, recs[:1]); err != nil {
		return s, fmt.Errorf("bucketing: %w", err)
	}
	if err := h.textJob(ctx, s, dir, n, modelPath, tokPath, tok); err != nil {
		return s, fmt.Errorf("text job: %w", err)
	}
	return s, nil
}

// loop calls fn until measure has passed (at least once) and returns the
// calls and the time they took.
func loop(measure time.Duration, fn func() error) (int, time.Duration, error) {
	calls := 0
	t0 := time.Now()
	for calls == 0 || time.Since(t0) < measure {
		if err := fn(); err != nil {
			return calls, 0, err
		}
		calls++
	}
	return calls, time.Since(t0), nil
}

// tokenization compares precog's text Encode (the pipeline's encode stage
// of a text model: read each title from Arrow, reject null or empty text,
// tokenize into the batch's id buffer) with the tokenizer's Encode alone
// on the same titles, one goroutine each.
func (h *harness) tokenization(s *section, mspec jobs.ModelSpec, tok *tokenizer.Tokenizer, recs []arrow.RecordBatch) error {
	m, err := model.Load(mspec, mspec.Path)
	if err != nil {
		return err
	}
	defer m.Close()
	var titles []string
	var textBytes int
	for _, r := range recs {
		col := r.Column(1).(*array.String)
		for i := range col.Len() {
			titles = append(titles, col.Value(i))
			textBytes += len(col.Value(i))
		}
	}
	rows := float64(len(titles))
	var best, bestRaw float64 // rows/s
	var ids []int32
	var tokens int
	for range reps {
		calls, took, err := loop(h.cfg.measure, func() error {
			for _, r := range recs {
				b, err := m.Encode(r)
				if err != nil {
					return err
				}
				b.Release()
			}
			return nil
		})
		if err != nil {
			return err
		}
		best = max(best, rows*float64(calls)/took.Seconds())
		calls, took, err = loop(h.cfg.measure, func() error {
			tokens = 0
			for _, t := range titles {
				ids = tok.Encode(ids[:0], t, textMaxLen)
				tokens += len(ids)
			}
			return nil
		})
		if err != nil {
			return err
		}
		bestRaw = max(bestRaw, rows*float64(calls)/took.Seconds())
	}
	mbps := func(rps float64) float64 { return rps * float64(textBytes) / rows / 1e6 }
	r := atLeast(fmt.Sprintf("tokenization: precog's encode stage (%d titles, %.0f bytes and %.1f tokens each on average) vs the tokenizer's Encode alone", len(titles), float64(textBytes)/rows, float64(tokens)/rows),
		best, bestRaw, "rows/s", 0.9)
	r.Ours += fmt.Sprintf(", %.1f MB/s", mbps(best))
	r.Raw += fmt.Sprintf(", %.1f MB/s", mbps(bestRaw))
	s.add(r)
	s.note("tokenization: %s (runner/model/tokenizer, precog's own pure-Go WordPiece/BPE); one goroutine each, best of %d alternating %s loops.", tok.Kind(), reps, h.cfg.measure)
	return nil
}

// bucketing runs Encode + Infer on the same length-skewed batches with
// length buckets padded to their own longest row and with every bucket
// padded to max_length.
func (h *harness) bucketing(ctx context.Context, s *section, mspec jobs.ModelSpec, recs []arrow.RecordBatch) error {
	load := func(padTo int) (*model.Model, error) {
		m, err := model.Load(mspec, mspec.Path)
		if err != nil {
			return nil, err
		}
		m.PadBucketsTo(padTo)
		return m, nil
	}
	bucketed, err := load(0)
	if err != nil {
		return err
	}
	defer bucketed.Close()
	padded, err := load(textMaxLen)
	if err != nil {
		return err
	}
	defer padded.Close()
	var rows int
	for _, r := range recs {
		rows += int(r.NumRows())
	}
	pass := func(m *model.Model) func() error {
		return func() error {
			for _, r := range recs {
				b, err := m.Encode(r)
				if err != nil {
					return err
				}
				out, err := m.Infer(ctx, b)
				b.Release()
				if err != nil {
					return err
				}
				out.Release()
			}
			return nil
		}
	}
	var best, bestPadded float64
	for range reps {
		calls, took, err := loop(h.cfg.measure, pass(bucketed))
		if err != nil {
			return err
		}
		best = max(best, float64(rows*calls)/took.Seconds())
		calls, took, err = loop(h.cfg.measure, pass(padded))
		if err != nil {
			return err
		}
		bestPadded = max(bestPadded, float64(rows*calls)/took.Seconds())
	}
	s.add(atLeast(fmt.Sprintf("length bucketing: encode + infer of %d length-skewed titles in length-sorted buckets sized by tokens, padded to their own longest (precog) vs every bucket padded to max_length %d", rows, textMaxLen),
		best, bestPadded, "rows/s", 1.5))
	return nil
}

// textJob runs a text embedding job of n titles into Parquet and compares
// it with raw ONNX Runtime on the same padded batches.
func (h *harness) textJob(ctx context.Context, s *section, dir string, n int, modelPath, tokPath string, tok *tokenizer.Tokenizer) error {
	data := filepath.Join(dir, "data")
	t0 := time.Now()
	if err := writeTitles(data, n); err != nil {
		return err
	}
	slog.Info("titles written", "rows", n, "took", time.Since(t0).Round(time.Millisecond))
	spec, err := h.writeTextJob(textJob{Name: "bench-text", Data: data, Model: modelPath, Tokenizer: tokPath,
		Batch: batchSize, Out: filepath.Join(h.cfg.work, "out", "text")})
	if err != nil {
		return err
	}
	raw, err := h.rawTextORT(modelPath, tok, min(n, textSample))
	if err != nil {
		return fmt.Errorf("raw ORT: %w", err)
	}
	st, err := h.runPrecog(ctx, spec, filepath.Join(h.cfg.work, "state-text"), nil)
	if err != nil {
		return err
	}
	raw2, err := h.rawTextORT(modelPath, tok, min(n, textSample))
	if err != nil {
		return fmt.Errorf("raw ORT: %w", err)
	}
	s.add(atLeast(fmt.Sprintf("text embedding job (%d titles → Parquet, %d shards): run rows/s (summary) vs raw ORT on the same padded buckets (sorted by length per %d-row window, sized by tokens)", st.RowsIn, (n+textRowsPerShard-1)/textRowsPerShard, runner.ReadRows(batchSize, textRowsPerShard)),
		st.SummaryRPS, max(raw, raw2), "rows/s", 0.9))
	s.note("text job: wall %s; stage busy time %s; raw ORT measured before and after the run: %s, %s (each the best of one session with the runtime's default intra-op threads and two sessions of half the cores each, precog's sessions: auto; no spinning, as precog's).",
		dur(st.Wall), st.Stages, rate(raw, "rows/s"), rate(raw2, "rows/s"))
	return nil
}

// rawTextORT is the raw limit of a text job: the first rows titles
// tokenized beforehand, sorted by token length per window of the pipeline's unit (runner.ReadRows) into the
// buckets the model cuts (model.TextBucketEnds), padded to their longest, as
// prebuilt input_ids and attention_mask tensors, run in a loop for the
// measure duration by ONNX Runtime sessions with the options precog uses,
// in each of rawConfigs; the best rows/s.
func (h *harness) rawTextORT(modelPath string, tok *tokenizer.Tokenizer, rows int) (float64, error) {
	best := 0.0
	for _, c := range rawConfigs() {
		rps, err := h.rawTextORTWith(modelPath, tok, rows, c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c, err)
		}
		slog.Info("raw ORT (text)", "config", c.String(), "rows_per_s", int64(rps))
		best = max(best, rps)
	}
	return best, nil
}

func (h *harness) rawTextORTWith(modelPath string, tok *tokenizer.Tokenizer, rows int, c rawConfig) (float64, error) {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return 0, err
	}
	defer opts.Destroy()
	if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
		return 0, err
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return 0, err
	}
	if c.threads > 0 {
		if err := opts.SetIntraOpNumThreads(c.threads); err != nil {
			return 0, err
		}
	}
	if err := opts.SetGraphOptimizationLevel(ort.GraphOptimizationLevelEnableAll); err != nil {
		return 0, err
	}
	if err := model.AppendDevice(opts, c.device); err != nil {
		return 0, err
	}
	sessions := make([]*ort.DynamicAdvancedSession, c.sessions)
	for i := range sessions {
		if sessions[i], err = ort.NewDynamicAdvancedSession(modelPath, []string{"input_ids", "attention_mask"}, []string{"last_hidden_state"}, opts); err != nil {
			return 0, err
		}
		defer sessions[i].Destroy()
	}
	var ins [][]ort.Value
	defer func() {
		for _, in := range ins {
			for _, v := range in {
				v.Destroy()
			}
		}
	}()
	pad := int64(tok.PadID())
	window := runner.ReadRows(batchSize, textRowsPerShard)
	for lo := 0; lo < rows; lo += window {
		var ids [][]int32
		for r := lo; r < min(lo+window, rows); r++ {
			ids = append(ids, tok.Encode(nil, title(r), textMaxLen))
		}
		slices.SortStableFunc(ids, func(a, b []int32) int { return len(a) - len(b) })
		sorted := make([]int, len(ids))
		for j, row := range ids {
			sorted[j] = len(row)
		}
		start := 0
		for _, end := range model.TextBucketEnds(sorted, jobs.DeviceCPU, batchSize) {
			bucket := ids[start:end]
			start = end
			T := len(bucket[len(bucket)-1])
			tid := make([]int64, len(bucket)*T)
			mask := make([]int64, len(bucket)*T)
			for j, row := range bucket {
				for k := range T {
					tid[j*T+k] = pad
					if k < len(row) {
						tid[j*T+k], mask[j*T+k] = int64(row[k]), 1
					}
				}
			}
			shape := ort.NewShape(int64(len(bucket)), int64(T))
			a, err := ort.NewTensor(shape, tid)
			if err != nil {
				return 0, err
			}
			m, err := ort.NewTensor(shape, mask)
			if err != nil {
				a.Destroy()
				return 0, err
			}
			ins = append(ins, []ort.Value{a, m})
		}
	}
	// Every session runs all the batches (the input tensors are only read).
	fns := make([]func() error, len(sessions))
	for i, sess := range sessions {
		outs := []ort.Value{nil}
		fns[i] = func() error {
			for _, in := range ins {
				outs[0] = nil
				if err := sess.Run(in, outs); err != nil {
					return err
				}
				outs[0].Destroy()
			}
			return nil
		}
		if err := fns[i](); err != nil { // warm up
			return 0, err
		}
	}
	calls, took, err := sideBySide(h.cfg.measure, fns)
	if err != nil {
		return 0, err
	}
	return float64(rows*calls) / took.Seconds(), nil
}
