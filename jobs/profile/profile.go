// Package profile summarises a run's model outputs so that a new version
// can be checked against the published one without rescanning either:
// per output field a count of rows and nulls, exact min and max, and a
// DDSketch of the values (github.com/DataDog/sketches-go, 1% relative
// accuracy, mergeable, bounded size); and a deterministic key sample, the
// keys with the smallest hashes (xxh3) with the values of the fields that
// same-key checks compare. A shard's profile is built as the shard is
// written and stored with its commit; profiles merge at stage, and the
// merged profile of a published version is stored with it.
package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/zeebo/xxh3"
)

// RelativeAccuracy is the DDSketches' relative accuracy on quantiles.
const RelativeAccuracy = 0.01

// maxBins bounds a sketch's bins (a few KiB encoded): enough for 1%
// accuracy over a 10^8 dynamic range before the lowest bins collapse.
const maxBins = 2048

// Field is the summary of one output field. For a list field the
// numeric summary is over its elements.
type Field struct {
	// Rows counts the rows seen, nulls included.
	Rows  int64 `json:"rows"`
	Nulls int64 `json:"nulls"`
	// Values counts the numeric values sketched (elements for lists).
	Values int64   `json:"values"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// List is set for a list field (top-k items, vectors).
	List bool `json:"list,omitempty"`
	// Sketch is the encoded DDSketch of the values.
	Sketch []byte `json:"sketch,omitempty"`

	dd *ddsketch.DDSketch
}

// Sampled is one key of the sample with the compared fields' values
// (numbers as float64, strings as string; a scalar is a one-element list).
type Sampled struct {
	Hash   uint64           `json:"h"`
	Key    string           `json:"k"`
	Values map[string][]any `json:"v,omitempty"`
}

// Profile is the summary of a shard, a run or a published version.
type Profile struct {
	Rows   int64             `json:"rows"`
	Fields map[string]*Field `json:"fields"`
	// Sample holds the SampleSize keys with the smallest hashes, ordered
	// by hash (all keys when there are fewer).
	Sample     []Sampled `json:"sample,omitempty"`
	SampleSize int       `json:"sample_size"`
	// Cap, when not 0, is a hash no sampled key reaches: the sample holds
	// the SampleSize smallest hashes among the keys below Cap (see
	// SampleCap), so a shard keeps only keys that can make its run's
	// sample.
	Cap uint64 `json:"cap,omitempty"`
}

// Options says what a Builder records.
type Options struct {
	// Fields are the output fields summarised.
	Fields []string
	// SampleFields are the fields whose values the key sample keeps.
	SampleFields []string
	// SampleSize is the keys kept (0: no sample).
	SampleSize int
	// Cap, when not 0, leaves keys whose hash reaches it out of the
	// sample (SampleCap).
	Cap uint64
}

// Builder accumulates a shard's profile from its output batches; safe for
// concurrent use.
type Builder struct {
	mu      sync.Mutex
	opts    Options
	p       *Profile
	sampled map[string]bool
	// entries holds the sample's candidates, unordered, and limit the
	// hash a candidate must be below (see sample.go); hashes is scratch.
	entries []Sampled
	limit   uint64
	// kept holds the distinct hashes of entries[:nKept] (the last shrink's
	// survivors) in order; hashes and spare are scratch.
	kept          []uint64
	nKept         int
	hashes, spare []uint64
}

// NewBuilder starts an empty profile.
func NewBuilder(opts Options) *Builder {
	b := &Builder{opts: opts, p: New(opts.SampleSize), sampled: map[string]bool{}, limit: math.MaxUint64}
	if opts.Cap != 0 {
		b.limit, b.p.Cap = opts.Cap, opts.Cap
	}
	for _, f := range opts.SampleFields {
		b.sampled[f] = true
	}
	for _, f := range opts.Fields {
		b.p.Fields[f] = newField()
	}
	return b
}

// New is an empty profile with a key sample of size sampleSize.
func New(sampleSize int) *Profile {
	return &Profile{Fields: map[string]*Field{}, SampleSize: sampleSize}
}

func newSketch() *ddsketch.DDSketch {
	s, err := ddsketch.LogCollapsingLowestDenseDDSketch(RelativeAccuracy, maxBins)
	if err != nil {
		panic(err) // constant, valid arguments
	}
	return s
}

func newField() *Field {
	return &Field{Min: math.Inf(1), Max: math.Inf(-1), dd: newSketch()}
}

// Add records one output batch: column keyCol is the key, the other
// columns named in Options.Fields are summarised.
func (b *Builder) Add(rec arrow.RecordBatch, keyCol int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := int(rec.NumRows())
	b.p.Rows += int64(n)
	cols := map[string]arrow.Array{}
	for i := 0; i < int(rec.NumCols()); i++ {
		name := rec.ColumnName(i)
		f, ok := b.p.Fields[name]
		if !ok || i == keyCol {
			continue
		}
		cols[name] = rec.Column(i)
		addColumn(f, rec.Column(i))
	}
	if b.opts.SampleSize <= 0 {
		return
	}
	keys := rec.Column(keyCol)
	ints, _ := keys.(*array.Int64)
	for r := 0; r < n; r++ {
		// Hash first, without allocating: most keys are not sampled.
		var h uint64
		if ints != nil {
			h = hashInt(ints.Value(r))
		} else {
			h = xxh3.HashString(keyString(keys, r))
		}
		if h >= b.limit {
			continue
		}
		s := Sampled{Hash: h, Key: keyString(keys, r)}
		for name := range b.sampled {
			if c, ok := cols[name]; ok {
				if s.Values == nil {
					s.Values = map[string][]any{}
				}
				s.Values[name] = rowValues(c, r)
			}
		}
		b.entries = append(b.entries, s)
		if len(b.entries) >= 2*max(b.opts.SampleSize, 128) {
			b.shrink()
		}
	}
}

// Profile returns the profile built so far.
func (b *Builder) Profile() *Profile {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.SampleSize > 0 {
		b.p.Sample = b.sample()
	}
	return b.p
}

func addColumn(f *Field, col arrow.Array) {
	f.Rows += int64(col.Len())
	f.Nulls += int64(col.NullN())
	switch c := col.(type) {
	case array.ListLike:
		f.List = true
		addValues(f, c.ListValues())
	default:
		addValues(f, col)
	}
}

// Sketch sampling: the first sketchExact values of a field (per shard) go
// into its sketch one by one; past them, every sketchStride-th value goes
// in with a weight of sketchStride. Counts, nulls, min and max stay exact;
// the histogram a check compares (deciles, PSI) is estimated from at least
// sketchExact values, whose sampling error is far below the sketch's own
// 1% relative accuracy at the sizes where the stride starts. This keeps the
// profile's cost per row small next to a cheap model's inference.
const (
	sketchExact  = 1 << 13
	sketchStride = 8
)

func addValues(f *Field, col arrow.Array) {
	switch c := col.(type) {
	case *array.Float32:
		addNumbers(f, c, c.Float32Values())
	case *array.Float64:
		addNumbers(f, c, c.Float64Values())
	case *array.Int64:
		addNumbers(f, c, c.Int64Values())
	case *array.Int32:
		addNumbers(f, c, c.Int32Values())
	}
}

// addNumbers adds a column's valid values (every value when it has no
// nulls, without a bitmap test per value).
func addNumbers[T float32 | float64 | int64 | int32](f *Field, col arrow.Array, vals []T) {
	nulls := col.NullN() > 0
	for i, x := range vals {
		if nulls && col.IsNull(i) {
			continue
		}
		v := float64(x)
		if v != v { // NaN
			continue
		}
		f.Values++
		if v < f.Min {
			f.Min = v
		}
		if v > f.Max {
			f.Max = v
		}
		switch {
		case f.Values <= sketchExact:
			_ = f.dd.Add(v) // ±Inf beyond the indexable range: min/max still hold it
		case f.Values%sketchStride == 0:
			_ = f.dd.AddWithCount(v, sketchStride)
		}
	}
}

// rowValues is row r of col as a list of float64 or string values.
func rowValues(col arrow.Array, r int) []any {
	if col.IsNull(r) {
		return nil
	}
	if c, ok := col.(array.ListLike); ok {
		start, end := c.ValueOffsets(r)
		out := make([]any, 0, end-start)
		for i := int(start); i < int(end); i++ {
			out = append(out, scalar(c.ListValues(), i))
		}
		return out
	}
	return []any{scalar(col, r)}
}

func scalar(col arrow.Array, i int) any {
	switch c := col.(type) {
	case *array.Float32:
		return float64(c.Value(i))
	case *array.Float64:
		return c.Value(i)
	case *array.Int64:
		return float64(c.Value(i))
	case *array.Int32:
		return float64(c.Value(i))
	case *array.String:
		return c.Value(i)
	}
	return col.ValueStr(i)
}

func keyString(col arrow.Array, r int) string {
	switch c := col.(type) {
	case *array.String:
		return c.Value(r)
	case *array.Int64:
		return strconv.FormatInt(c.Value(r), 10)
	}
	return col.ValueStr(r)
}

// Merge adds o into p: counts add, sketches merge, samples union (the
// smallest hashes kept).
func (p *Profile) Merge(o *Profile) error {
	if o == nil {
		return nil
	}
	p.Rows += o.Rows
	if p.SampleSize < o.SampleSize {
		p.SampleSize = o.SampleSize
	}
	for name, of := range o.Fields {
		f, ok := p.Fields[name]
		if !ok {
			f = newField()
			p.Fields[name] = f
		}
		f.Rows += of.Rows
		f.Nulls += of.Nulls
		f.Values += of.Values
		f.Min = math.Min(f.Min, of.Min)
		f.Max = math.Max(f.Max, of.Max)
		f.List = f.List || of.List
		if err := f.sketch().MergeWith(of.sketch()); err != nil {
			return fmt.Errorf("merge sketch of %s: %w", name, err)
		}
	}
	if o.Cap != 0 && (p.Cap == 0 || o.Cap < p.Cap) {
		p.Cap = o.Cap
	}
	p.Sample = mergeSamples(p.Sample, o.Sample, p.SampleSize)
	if p.Cap != 0 {
		p.Sample = slices.DeleteFunc(p.Sample, func(s Sampled) bool { return s.Hash >= p.Cap })
	}
	return nil
}

// sketch returns the field's DDSketch, decoding it on first use.
func (f *Field) sketch() *ddsketch.DDSketch {
	if f.dd == nil {
		f.dd = newSketch()
		if len(f.Sketch) > 0 {
			if err := f.dd.DecodeAndMergeWith(f.Sketch); err != nil {
				f.dd = newSketch() // Decode validated it; unreachable
			}
		}
	}
	return f.dd
}

// ErrCorrupt: a stored profile does not decode.
var ErrCorrupt = errors.New("corrupt output profile")

// decodeJSON reads the first stored form, JSON (profiles written by
// earlier versions).
func decodeJSON(b []byte) (*Profile, error) {
	p := &Profile{}
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	for i := range p.Sample {
		p.Sample[i].Hash = xxh3.HashString(p.Sample[i].Key) // the hash is the key's
	}
	return p, nil
}

// validate restores what the stored form leaves out and checks what
// merges rely on.
func (p *Profile) validate() (*Profile, error) {
	if p.Fields == nil {
		p.Fields = map[string]*Field{}
	}
	for name, f := range p.Fields {
		if f.Values == 0 {
			f.Min, f.Max = math.Inf(1), math.Inf(-1)
		}
		if len(f.Sketch) > 0 {
			dd, err := ddsketch.DecodeDDSketch(f.Sketch, store.DefaultProvider, nil)
			if err != nil {
				return nil, fmt.Errorf("%w: field %s: %w", ErrCorrupt, name, err)
			}
			f.dd = dd
		}
	}
	// Merges rely on the sample's order; a row written by another
	// version is put in order rather than trusted.
	if !slices.IsSortedFunc(p.Sample, compareSampled) {
		slices.SortFunc(p.Sample, compareSampled)
	}
	if p.SampleSize < 0 {
		return nil, fmt.Errorf("%w: sample_size %d", ErrCorrupt, p.SampleSize)
	}
	if len(p.Sample) > p.SampleSize {
		p.Sample = p.Sample[:p.SampleSize]
	}
	if p.Cap != 0 {
		p.Sample = slices.DeleteFunc(p.Sample, func(s Sampled) bool { return s.Hash >= p.Cap })
	}
	return p, nil
}
