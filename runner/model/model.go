package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/precog-ml/precog/jobs"
)

// elemKind is a tensor element type precog can feed and store.
type elemKind int

const (
	kindFloat32 elemKind = iota
	kindFloat64
	kindInt32
	kindInt64
	// kindString is a tensor(string): fed from string columns (a
	// OneHotEncoder or LabelEncoder pipeline), stored as text.
	kindString
)

var kindNames = [...]string{"float32", "float64", "int32", "int64", "string"}

func (k elemKind) String() string { return kindNames[k] }

func (k elemKind) isFloat() bool { return k == kindFloat32 || k == kindFloat64 }

func (k elemKind) arrowType() arrow.DataType {
	switch k {
	case kindFloat32:
		return arrow.PrimitiveTypes.Float32
	case kindFloat64:
		return arrow.PrimitiveTypes.Float64
	case kindInt32:
		return arrow.PrimitiveTypes.Int32
	case kindString:
		return arrow.BinaryTypes.String
	default:
		return arrow.PrimitiveTypes.Int64
	}
}

func kindOf(typeName string) (elemKind, bool) {
	for i, n := range kindNames {
		if n == typeName {
			return elemKind(i), true
		}
	}
	return 0, false
}

const supportedTypes = "float32, float64, int32, int64, string"

// input is one model input bound to the spec's columns.
type input struct {
	name    string
	kind    elemKind
	rank    int      // 1: [N], 2: [N, width]
	width   int      // static trailing dimension; -1 when dynamic
	columns []string // numeric columns stacked into [N, len(columns)]
	list    string   // or one list / fixed-size-list column -> [N, len]
	shape   []int64  // as declared, for error text
	// text is set on a tokenized text input (text.go); derived is "mask"
	// or "zeros" on a mask_of / zeros_like input, which follows input
	// textOf.
	text    *textInput
	derived string
	textOf  int
}

// field is the spec path of this input's column mapping, for errors.
func (in *input) field() string {
	if in.list != "" {
		return "model.inputs." + in.name + ".column"
	}
	return "model.inputs." + in.name + ".columns"
}

// output is one model output the spec stores.
type output struct {
	name  string
	field string   // stored field name
	kind  elemKind // element type
	list  bool     // [N, k] with k != 1 -> list field; else scalar
	width int      // static k of a list output; -1 dynamic
	// zipKey is set for a sequence<map<K,V>> output (sklearn's ZipMap):
	// the key type, "int64" or "string"; kind is then V's type.
	zipKey string
	// pool is set for a [N,T,D] output (last_hidden_state) reduced to a
	// [N,D] list field by model.pooling.
	pool bool
	// inGraph: the pooling (and normalize: l2) run as nodes appended to
	// the graph (graphpool.go); the session returns [N,D].
	inGraph bool
}

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
	// padTo, when set (benchmarks only), pads every bucket to this length:
	// the padding-to-max_length baseline bucketing is measured against.
	padTo int
}

// session is one ONNX Runtime session and its reusable run options.
type session struct {
	s  *ort.DynamicAdvancedSession
	ro *ort.RunOptions
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
	m.version = spec.Version
	if m.version == "" {
		sum := sha256.Sum256(data)
		m.version = hex.EncodeToString(sum[:])[:12]
	}
	m.plan = planSessions(spec, len(data))
	run, why, err := m.poolInGraph(data)
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

func names(ts []TensorInfo) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Name
	}
	return strings.Join(s, ", ")
}

func findTensor(ts []TensorInfo, name string) (TensorInfo, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

func (m *Model) bindInputs() error {
	path := m.spec.Path
	if len(m.spec.Inputs) == 0 {
		return m.errorf("model.inputs", "required: map each model input to columns (inputs of %s: %s)", path, names(m.info.Inputs))
	}
	specNames := make([]string, 0, len(m.spec.Inputs))
	for n := range m.spec.Inputs {
		specNames = append(specNames, n)
	}
	sort.Strings(specNames)
	for _, n := range specNames {
		if _, ok := findTensor(m.info.Inputs, n); !ok {
			return m.errorf("model.inputs."+n, "no input %q in %s (inputs: %s)", n, path, names(m.info.Inputs))
		}
	}
	for _, t := range m.info.Inputs {
		is, ok := m.spec.Inputs[t.Name]
		if !ok {
			return m.errorf("model.inputs", "input %q of %s is not mapped to columns (inputs: %s)", t.Name, path, names(m.info.Inputs))
		}
		f := "model.inputs." + t.Name
		if len(is.Text) > 0 || is.MaskOf != "" || is.ZerosLike != "" {
			if err := m.bindTextInput(t, is); err != nil {
				return err
			}
			continue
		}
		if (len(is.Columns) == 0) == (is.Column == "") {
			return m.errorf(f, "set exactly one of columns (numeric columns) or column (one list column)")
		}
		if !t.Tensor {
			return m.errorf(f, "input %q is %s, not a tensor; precog feeds tensors of %s", t.Name, t.Type, supportedTypes)
		}
		kind, ok := kindOf(t.Type)
		if !ok {
			return m.errorf(f, "input %q has element type %s; precog feeds %s", t.Name, t.Type, supportedTypes)
		}
		if kind == kindString && is.Column != "" {
			return m.errorf(f+".column", "input %q is a string tensor: feed it string columns with columns: [...]", t.Name)
		}
		in := &input{name: t.Name, kind: kind, columns: is.Columns, list: is.Column, shape: t.Shape, rank: 2, width: -1}
		switch {
		case t.Shape == nil:
			// Undeclared rank: feed [N, k].
		case len(t.Shape) == 1:
			in.rank, in.width = 1, 1
			if in.list != "" || len(in.columns) != 1 {
				return m.errorf(in.field(), "input %q has shape %s: it takes exactly one numeric column", t.Name, shapeString(t))
			}
		case len(t.Shape) == 2:
			in.width = int(t.Shape[1])
		default:
			return m.errorf(f, "input %q has shape %s; precog feeds inputs of shape [N] or [N,k]", t.Name, shapeString(t))
		}
		if len(t.Shape) > 0 && t.Shape[0] >= 0 {
			// A fixed batch dimension: batches are run in chunks of that
			// many rows, the last one zero-padded.
			b := int(t.Shape[0])
			if b == 0 || (m.fixedBatch > 0 && b != m.fixedBatch) {
				return m.errorf(f, "input %q has shape %s: its batch dimension differs from the other inputs' (%d)", t.Name, shapeString(t), m.fixedBatch)
			}
			m.fixedBatch = b
		}
		if len(in.columns) > 0 && in.width >= 0 && len(in.columns) != in.width {
			return m.errorf(in.field(), "%d columns but input %q has shape %s", len(in.columns), t.Name, shapeString(t))
		}
		m.inputs = append(m.inputs, in)
	}
	return m.linkTextInputs()
}

func (m *Model) bindOutputs() error {
	path := m.spec.Path
	if len(m.spec.Outputs) == 0 {
		return m.errorf("model.outputs", "required: map model outputs to field names (outputs of %s: %s)", path, names(m.info.Outputs))
	}
	specNames := make([]string, 0, len(m.spec.Outputs))
	for n := range m.spec.Outputs {
		specNames = append(specNames, n)
	}
	sort.Strings(specNames)
	for _, n := range specNames {
		if _, ok := findTensor(m.info.Outputs, n); !ok {
			return m.errorf("model.outputs."+n, "no output %q in %s (outputs: %s)", n, path, names(m.info.Outputs))
		}
	}
	seen := map[string]string{}
	for _, t := range m.info.Outputs {
		fieldName, ok := m.spec.Outputs[t.Name]
		if !ok {
			continue // not stored, not run
		}
		f := "model.outputs." + t.Name
		if fieldName == "" {
			return m.errorf(f, "empty field name")
		}
		if prev, dup := seen[fieldName]; dup {
			return m.errorf(f, "field %q is already the field of output %q", fieldName, prev)
		}
		seen[fieldName] = t.Name
		if o, ok := zipMapOutput(t, fieldName); ok {
			m.outputs = append(m.outputs, o)
			m.outNames = append(m.outNames, t.Name)
			m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: o.mapType()})
			continue
		}
		if !t.Tensor {
			return m.errorf(f, "output %q is %s, not a tensor; precog stores tensors of %s and sequence<map<int64|string,float32|float64|int64>> (leave it out of model.outputs to ignore it)", t.Name, t.Type, supportedTypes)
		}
		kind, ok := kindOf(t.Type)
		if !ok {
			return m.errorf(f, "output %q has element type %s; precog stores %s", t.Name, t.Type, supportedTypes)
		}
		o := &output{name: t.Name, field: fieldName, kind: kind, width: -1}
		if len(t.Shape) == 3 {
			if err := m.bindPooled(o, t); err != nil {
				return err
			}
			m.outputs = append(m.outputs, o)
			m.outNames = append(m.outNames, t.Name)
			m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: arrow.ListOf(kind.arrowType())})
			continue
		}
		switch {
		case len(t.Shape) == 1:
		case len(t.Shape) == 2 && t.Shape[1] == 1:
		case len(t.Shape) == 2:
			o.list = true
			o.width = int(t.Shape[1])
		case t.Shape == nil:
			return m.errorf(f, "output %q declares no shape; precog stores outputs of shape [N], [N,1] (scalar) or [N,k] (list)", t.Name)
		default:
			return m.errorf(f, "output %q has shape %s; precog stores outputs of shape [N], [N,1] (scalar) or [N,k] (list)", t.Name, shapeString(t))
		}
		m.outputs = append(m.outputs, o)
		m.outNames = append(m.outNames, t.Name)
		typ := kind.arrowType()
		if o.list {
			typ = arrow.ListOf(typ)
		}
		m.fields = append(m.fields, arrow.Field{Name: fieldName, Type: typ})
	}
	m.schema = arrow.NewSchema(m.fields, nil)
	return nil
}

// parseDevice reads "cpu" (or "") and "cuda:N"; cuda is -1 for cpu.
func parseDevice(dev string) (cuda int, err error) {
	switch {
	case dev == "" || dev == jobs.DeviceCPU:
		return -1, nil
	case strings.HasPrefix(dev, "cuda:"):
		n, err := strconv.Atoi(strings.TrimPrefix(dev, "cuda:"))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not cpu or cuda:N (N a device number)", dev)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("%q is not cpu or cuda:N", dev)
	}
}

// CheckDevice tells whether this process can run models on dev ("cpu",
// "cuda:N") before it takes any work: the name, the ONNX Runtime library,
// and for cuda:N that the library has the CUDA execution provider. A
// worker checks its --devices with it, so that a CPU-only build fails at
// start instead of failing the shards it claims.
func CheckDevice(dev string) error {
	cuda, err := parseDevice(dev)
	if err != nil {
		return err
	}
	if err := Init(); err != nil {
		return err
	}
	if cuda < 0 {
		return nil
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return fmt.Errorf("onnx runtime: session options: %w", err)
	}
	defer opts.Destroy()
	return appendCUDA(opts, cuda)
}

// sessionOptions builds the options every session of this model shares.
func (m *Model) sessionOptions() (*ort.SessionOptions, error) {
	cuda, err := parseDevice(m.spec.Device)
	if err != nil {
		return nil, m.errorf("model.device", "%v", err)
	}
	if m.spec.Threads < 0 {
		return nil, m.errorf("model.threads", "%d is negative (0 = runtime default)", m.spec.Threads)
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx runtime: session options: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			opts.Destroy()
		}
	}()
	if m.plan.threads > 0 {
		if err := opts.SetIntraOpNumThreads(m.plan.threads); err != nil {
			return nil, m.errorf("model.threads", "%v", err)
		}
	}
	// ORT's intra-op threads spin between runs by default. In precog the
	// same cores also read, encode and write (or serve HTTP), and spinning
	// threads starve those stages: measured on 2 cores, the ranker job ran
	// 1.4-1.9x faster without it. Threads sleep instead. PRECOG_ORT_SPIN=1
	// brings spinning back, except for a model loaded WithoutSpinning.
	if os.Getenv("PRECOG_ORT_SPIN") != "1" || m.opts.noSpin {
		if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
			return nil, fmt.Errorf("onnx runtime: spinning: %w", err)
		}
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx runtime: inter-op threads: %w", err)
	}
	if err := opts.SetGraphOptimizationLevel(ort.GraphOptimizationLevelEnableAll); err != nil {
		return nil, fmt.Errorf("onnx runtime: graph optimisation: %w", err)
	}
	if cuda >= 0 {
		if err := appendCUDA(opts, cuda); err != nil {
			return nil, m.errorf("model.device", "%v", err)
		}
	}
	ok = true
	return opts, nil
}

func appendCUDA(opts *ort.SessionOptions, device int) error {
	noCUDA := func(cause error) error {
		// With the provider beside the core, the usual cause is a CUDA
		// library the loader cannot find: name it.
		if err := cudaLibraryError(device, LibraryPath()); err != nil {
			return fmt.Errorf("%w (onnx runtime: %v)", err, cause)
		}
		return fmt.Errorf("cuda:%d requested but this ONNX Runtime build has no CUDA execution provider (%s): %w", device, LibraryPath(), cause)
	}
	co, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return noCUDA(err)
	}
	defer co.Destroy()
	// Update is where a build without the CUDA provider libraries fails.
	if err := co.Update(map[string]string{"device_id": strconv.Itoa(device)}); err != nil {
		return noCUDA(err)
	}
	if err := opts.AppendExecutionProviderCUDA(co); err != nil {
		return noCUDA(err)
	}
	return nil
}

func (m *Model) startSessions(data []byte) error {
	if err := Init(); err != nil {
		return err
	}
	if m.spec.Sessions < 0 {
		return m.errorf("model.sessions", "%d is negative (0 = auto)", m.spec.Sessions)
	}
	n := m.plan.sessions
	opts, err := m.sessionOptions()
	if err != nil {
		return err
	}
	defer opts.Destroy()
	inNames := make([]string, len(m.inputs))
	for i, in := range m.inputs {
		inNames[i] = in.name
	}
	m.pool = make(chan *session, n)
	m.closing = make(chan struct{})
	for range n {
		s, err := ort.NewDynamicAdvancedSessionWithONNXData(data, inNames, m.outNames, opts)
		if err != nil {
			m.destroySessions()
			if cuda, _ := parseDevice(m.spec.Device); cuda >= 0 {
				return m.errorf("model.device", "cuda:%d: create session for %s: %v", cuda, m.spec.Path, err)
			}
			return m.errorf("model.path", "%s: create ONNX Runtime session: %v", m.spec.Path, localeHint(err))
		}
		ro, err := ort.NewRunOptions()
		if err != nil {
			s.Destroy()
			m.destroySessions()
			return fmt.Errorf("onnx runtime: run options: %w", err)
		}
		ss := &session{s: s, ro: ro}
		m.sessions = append(m.sessions, ss)
		m.pool <- ss
	}
	return nil
}

func (m *Model) destroySessions() {
	for _, s := range m.sessions {
		s.ro.Destroy()
		s.s.Destroy()
	}
	m.sessions = nil
}

// errClosed is returned by Infer after Close.
var errClosed = errors.New("model closed")

// acquire takes a session from the pool, waiting for one to be free.
func (m *Model) acquire(ctx context.Context) (*session, error) {
	select {
	case s := <-m.pool:
		return s, nil
	default:
	}
	select {
	case s := <-m.pool:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.closing:
		return nil, errClosed
	}
}

func (m *Model) release(s *session) { m.pool <- s }

// run runs the session; cancelling ctx terminates a run in progress.
func (s *session) run(ctx context.Context, in, out []ort.Value) error {
	if ctx.Done() == nil {
		return s.s.RunWithOptions(in, out, s.ro)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.ro.Terminate()
		close(fired)
	})
	err := s.s.RunWithOptions(in, out, s.ro)
	if !stop() {
		<-fired
		s.ro.UnsetTerminate()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return err
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
