package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/jobs"
)

// Model is a loaded ONNX model with a pool of sessions, checked against a
// job's model spec. It is safe for concurrent use.
type Model struct {
	spec    jobs.ModelSpec
	opts    loadOptions
	file    string
	version string
	info    Info
	inputs  []*input  // in model input order
	outputs []*output // the spec's outputs, in model output order
	fields  []arrow.Field
	schema  *arrow.Schema
	// fixedBatch is the model's static batch dimension; 0 when dynamic.
	fixedBatch int
	// batch is the rows of one inference call (BatchRows).
	batch int

	// plan is the sessions started and each one's intra-op threads.
	plan     sessionPlan
	pool     chan *session
	sessions []*session
	closing  chan struct{}
	closeMu  sync.Mutex
	closed   bool
	bufs     sync.Pool // *batchBufs
	outNames []string
	// hasText: the model has a tokenized text input; Infer runs it in
	// length buckets (text.go).
	hasText bool
	// goPooling says why Go pools a pooled output instead of the graph
	// (empty when the graph does, or nothing is pooled).
	goPooling string
	// ties are the stored top-k score and id lists whose equal scores are
	// put in ascending id order (ties.go).
	ties []tiePair
	// padTo, when set (benchmarks only), pads every bucket to this length:
	// the padding-to-max_length baseline bucketing is measured against.
	padTo int
}

// errorf prefixes a spec error with the spec file and the field path.
func (m *Model) errorf(field, format string, args ...any) error {
	msg := field + ": " + fmt.Sprintf(format, args...)
	if m.file != "" {
		msg = m.file + ": " + msg
	}
	return errors.New(msg)
}

// LoadOption tunes how Load starts sessions beyond what the job spec says.
type LoadOption func(*loadOptions)

type loadOptions struct {
	noSpin bool
	// goPooling keeps model.pooling in Go (tests compare it with the
	// graph's).
	goPooling bool
}

// WithoutSpinning keeps ONNX Runtime's intra-op threads from spinning while
// they wait for work (session.intra_op.allow_spinning = 0) even when
// PRECOG_ORT_SPIN=1 turns spinning on for batch runs: a server that also
// parses requests on the same cores would lose those cores to threads
// spinning between its short, sporadic runs.
func WithoutSpinning() LoadOption { return func(o *loadOptions) { o.noSpin = true } }

// Load reads the model spec.Path, checks the spec's inputs and outputs
// against it (before any data is read) and starts spec.Sessions sessions on
// spec.Device. file is the job spec's path, used in error text only.
//
// A model or tokenizer path that is an object-store URL is read from the
// process's object cache (objstore.LocalFile): fetched once, kept by
// content hash.
func Load(spec jobs.ModelSpec, file string, opts ...LoadOption) (*Model, error) {
	orig := spec.Path
	local, err := localFiles(spec)
	if err != nil {
		return nil, (&Model{spec: spec, file: file}).errorf("model.path", "%v", err)
	}
	spec = local
	m := &Model{spec: spec, file: file}
	for _, o := range opts {
		o(&m.opts)
	}
	data, err := readModelFile(spec.Path)
	if err != nil {
		return nil, m.errorf("model.path", "%v", err)
	}
	if m.info, err = parseModel(data); err != nil {
		return nil, m.errorf("model.path", "%s: not an ONNX model: %v", orig, err)
	}
	if err := m.bindInputs(); err != nil {
		return nil, err
	}
	if err := m.bindOutputs(); err != nil {
		return nil, err
	}
	m.batch = m.resolveBatch()
	m.version = spec.Version
	if m.version == "" {
		sum := sha256.Sum256(data)
		m.version = hex.EncodeToString(sum[:])[:12]
	}
	if m.ties, err = m.topKTiePairs(data); err != nil {
		return nil, m.errorf("model.path", "%s: read the graph's TopK outputs: %v", spec.Path, err)
	}
	m.plan = planSessions(spec, len(data))
	run := data
	if spec.Precision == jobs.PrecisionFP16 {
		if run, err = toFloat16(data); err != nil {
			return nil, m.errorf("model.precision", "%s: fp16: %v (precision: fp32 runs the model as it is)", spec.Path, err)
		}
	}
	run, why, err := m.poolInGraph(run)
	if err != nil {
		return nil, m.errorf("model.pooling", "%s: append the pooling to the graph: %v", spec.Path, err)
	}
	m.goPooling = why
	if err := m.startSessions(run); err != nil {
		return nil, err
	}
	return m, nil
}

// Sessions is how many batches the model runs at once: spec.Sessions, or
// what planSessions chose for sessions: 0 (auto).
func (m *Model) Sessions() int { return m.plan.sessions }

// BatchRows is the rows of one inference call: model.batch_size, or what
// the device chose where the spec leaves it out (jobs.ModelSpec.BatchRows,
// from the bytes of one row's input tensors). A text model's buckets are
// cut by tokens (text.go) and hold at most this many rows.
func (m *Model) BatchRows() int { return m.batch }

func (m *Model) resolveBatch() int {
	if m.hasText && m.spec.AutoBatch() {
		return bucketRows
	}
	return m.spec.BatchRows(m.inputRowBytes())
}

// inputRowBytes is the bytes of one row across the input tensors (a
// dynamic width counts as one element: unknown before the data is read).
func (m *Model) inputRowBytes() int {
	n := 0
	for _, in := range m.inputs {
		w := max(in.width, 1)
		if in.list == "" && len(in.columns) > 0 {
			w = len(in.columns)
		}
		n += w * in.kind.size()
	}
	return n
}

// Version is the model version stored with every record: the spec's version,
// else the first 12 hex digits of the model file's sha256.
func (m *Model) Version() string { return m.version }

// Info is the model's graph inputs and outputs.
func (m *Model) Info() Info { return m.info }

// Spec is the model spec the model was loaded with.
func (m *Model) Spec() jobs.ModelSpec { return m.spec }

// InputColumns lists the source columns the spec's inputs read, in model
// input order without duplicates, for the source's projection.
func (m *Model) InputColumns() []string {
	var cols []string
	seen := map[string]bool{}
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			cols = append(cols, c)
		}
	}
	for _, in := range m.inputs {
		if in.list != "" {
			add(in.list)
		}
		if in.text != nil {
			for _, c := range in.text.columns {
				add(c)
			}
		}
		for _, c := range in.columns {
			add(c)
		}
	}
	return cols
}

// InputInfo describes how one model input is fed, for callers that build
// rows themselves (the lookup API's live inference).
type InputInfo struct {
	Name string // ONNX input name
	Type string // float32, float64, int32 or int64
	// Columns (stacked) or Column (one list column), as in the spec.
	Columns []string
	Column  string
	// Width is the values per row; -1 when the model leaves it dynamic.
	Width int
}

// Inputs describes the model's inputs in model order.
func (m *Model) Inputs() []InputInfo {
	out := make([]InputInfo, len(m.inputs))
	for i, in := range m.inputs {
		w := in.width
		if in.list == "" {
			w = len(in.columns)
		}
		out[i] = InputInfo{Name: in.name, Type: in.kind.String(), Columns: append([]string(nil), in.columns...), Column: in.list, Width: w}
	}
	return out
}

// OutputFields is one Arrow field per stored output, in the model's output
// order, named by the spec's field name. Scalars ([N] or [N,1]) are
// float32/float64/int32/int64 fields; [N,k] outputs are variable-size
// list<…> fields (not fixed-size lists) so that every sink (Parquet,
// Postgres arrays, JSON) handles them without a special case.
func (m *Model) OutputFields() []arrow.Field {
	return append([]arrow.Field(nil), m.fields...)
}

// Close waits for running inferences to finish and frees the sessions.
// Infer calls after Close fail.
func (m *Model) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	close(m.closing)
	for range m.sessions {
		<-m.pool
	}
	m.destroySessions()
	return nil
}
