package model

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Reject is one source row left out of a batch because a feature cannot be
// fed to the model.
type Reject struct {
	// Row is the row's index in the source batch.
	Row int
	// Column is the source column holding the bad value.
	Column string
	// Reason is self-contained: "column f3: null", "column features[7]: NaN",
	// "column features: length 15, want 16".
	Reason string
}

// Batch is one source batch converted to input tensors. Rejected rows are
// left out of the tensors; Rows maps tensor rows back to source rows.
// Release returns its buffers for reuse; the Batch must not be used after.
type Batch struct {
	// Rows are the source row indices of the kept rows, in order.
	Rows []int
	// Rejects are the rejected rows, in row order, one per row.
	Rejects []Reject

	m    *Model
	bufs *batchBufs
	// widths[i] is the trailing dimension of input i in this batch.
	widths []int
}

// batchBufs are the reusable buffers of one Batch.
type batchBufs struct {
	data    []any // per input: []float32, []float64, []int32 or []int64
	widths  []int
	rows    []int
	bad     []bool
	rejects []Reject
	starts  []int
	// tokens of the text input, row r at tokIDs[tokOff[r]:tokOff[r+1]].
	tokIDs []int32
	tokOff []int
}

// Release returns the batch's buffers to the model for reuse.
func (b *Batch) Release() {
	if b == nil || b.bufs == nil {
		return
	}
	clear(b.bufs.rejects) // drop reason strings
	b.m.bufs.Put(b.bufs)
	b.bufs, b.Rows, b.Rejects = nil, nil, nil
}

// number is an Arrow numeric value type precog reads.
type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// elem is a tensor element type precog feeds.
type elem interface {
	float32 | float64 | int32 | int64
}

// colRef is one resolved source column of an input, as numbers (see
// asNumbers); child is the values of a list column.
type colRef struct {
	name  string
	arr   arrow.Array
	child arrow.Array
}

// Encode converts one source batch into the model's input tensors. A row
// with a null or non-finite feature, an integer out of the input type's
// range, or a list of the wrong length is rejected, not an error; errors are
// for batches that cannot match the spec at all (a missing column, a string
// column).
func (m *Model) Encode(rec arrow.RecordBatch) (*Batch, error) {
	n := int(rec.NumRows())
	bufs, _ := m.bufs.Get().(*batchBufs)
	if bufs == nil {
		bufs = &batchBufs{data: make([]any, len(m.inputs)), widths: make([]int, len(m.inputs))}
	}
	b := &Batch{m: m, bufs: bufs, widths: bufs.widths}
	ok := false
	defer func() {
		if !ok {
			b.Release()
		}
	}()
	bufs.bad = grow(bufs.bad, n)
	clear(bufs.bad)
	bufs.rejects = bufs.rejects[:0]
	bad := bufs.bad
	reject := func(row int, col, reason string) {
		if !bad[row] {
			bad[row] = true
			bufs.rejects = append(bufs.rejects, Reject{Row: row, Column: col, Reason: reason})
		}
	}
	g := gathered{cols: make([][]colRef, len(m.inputs))}
	defer g.release()
	if err := m.gatherInputs(rec, b, &g, reject); err != nil {
		return nil, err
	}

	rows := bufs.rows[:0]
	for r := range n {
		if !bad[r] {
			rows = append(rows, r)
		}
	}
	bufs.rows = rows
	rejects := bufs.rejects
	if !slices.IsSortedFunc(rejects, cmpReject) {
		slices.SortFunc(rejects, cmpReject)
	}
	b.Rows, b.Rejects = rows, rejects
	m.fillInputs(b, g.cols, rows)
	ok = true
	return b, nil
}

// gathered is every input's source columns for one batch, and the
// converted arrays Encode owns until its tensors are filled.
type gathered struct {
	cols  [][]colRef
	owned []arrow.Array
}

func (g *gathered) own(a arrow.Array) { g.owned = append(g.owned, a) }

func (g *gathered) release() {
	for _, a := range g.owned {
		a.Release()
	}
}

// gatherInputs finds each input's columns in rec, checks their types and
// rejects rows whose values cannot feed the model; text inputs are encoded
// here (tokenized), the others are filled by fillInputs.
func (m *Model) gatherInputs(rec arrow.RecordBatch, b *Batch, g *gathered, reject func(row int, col, reason string)) error {
	schema := rec.Schema()
	for i, in := range m.inputs {
		var err error
		switch {
		case in.text != nil || in.derived != "":
			err = m.encodeText(rec, in, b.bufs, reject)
		case in.list != "":
			err = m.gatherList(rec, i, in, b, g, reject)
		default:
			b.widths[i] = len(in.columns)
			g.cols[i] = make([]colRef, len(in.columns))
			for j, c := range in.columns {
				idx := schema.FieldIndices(c)
				if len(idx) == 0 {
					return fmt.Errorf("%s[%d]: column %q not in batch (have: %s)", in.field(), j, c, compressNames(fieldNames(schema)))
				}
				if err := m.checkScalarType(in, fmt.Sprintf("%s[%d]", in.field(), j), schema.Field(idx[0])); err != nil {
					return err
				}
				g.cols[i][j] = gatherScalar(rec.Column(idx[0]), c, in.kind, g, reject)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// gatherList is a list (or fixed-size list) column feeding input i.
func (m *Model) gatherList(rec arrow.RecordBatch, i int, in *input, b *Batch, g *gathered, reject func(row int, col, reason string)) error {
	schema := rec.Schema()
	idx := schema.FieldIndices(in.list)
	if len(idx) == 0 {
		return fmt.Errorf("%s: column %q not in batch (have: %s)", in.field(), in.list, compressNames(fieldNames(schema)))
	}
	arr := rec.Column(idx[0])
	w, err := m.listWidth(in, schema.Field(idx[0]))
	if err != nil {
		return err
	}
	ll := arr.(array.ListLike)
	if w < 0 {
		w = firstListLen(ll)
	}
	b.widths[i] = w
	child, converted := asNumbers(ll.ListValues())
	if converted {
		g.own(child)
	}
	checkList(ll, child, in, w, reject)
	g.cols[i] = []colRef{{in.list, arr, child}}
	return nil
}

// gatherScalar is one scalar column of an input, converted to the
// numbers the tensor takes (strings as they are), its bad rows rejected.
func gatherScalar(col arrow.Array, name string, kind elemKind, g *gathered, reject func(row int, col, reason string)) colRef {
	if kind == kindString {
		scanStrings(col, name, reject)
		return colRef{name, col, nil}
	}
	arr, converted := asNumbers(col)
	if converted {
		g.own(arr)
	}
	scan(arr, kind)(0, arr.Len(), func(row int, why string) bool {
		reject(row, name, "column "+name+": "+why)
		return true
	})
	return colRef{name, arr, nil}
}

// fillInputs fills each non-text input's tensor buffer from its columns,
// for the kept rows, padded to the model's batch size.
func (m *Model) fillInputs(b *Batch, cols [][]colRef, rows []int) {
	bufs := b.bufs
	padded := m.paddedRows(len(rows))
	for i, in := range m.inputs {
		if in.text != nil || in.derived != "" {
			continue // built per bucket by inferText
		}
		f := fill{bufs: bufs, i: i, in: in, cols: cols[i], rows: rows, padded: padded, width: b.widths[i]}
		switch in.kind {
		case kindFloat32:
			bufs.data[i] = fillInput[float32](f)
		case kindFloat64:
			bufs.data[i] = fillInput[float64](f)
		case kindInt32:
			bufs.data[i] = fillInput[int32](f)
		case kindInt64:
			bufs.data[i] = fillInput[int64](f)
		case kindString:
			bufs.data[i] = fillStrings(bufs, i, cols[i], rows, padded, b.widths[i])
		}
	}
}

func cmpReject(a, b Reject) int { return a.Row - b.Row }

// paddedRows is the tensor row count for kept rows: kept itself, or the next
// multiple of a fixed batch dimension.
func (m *Model) paddedRows(kept int) int {
	if m.fixedBatch <= 0 || kept == 0 {
		return kept
	}
	return (kept + m.fixedBatch - 1) / m.fixedBatch * m.fixedBatch
}

// grow returns s resized to n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}

// fillInput writes input i's tensor data for the kept rows into its reused
// buffer and zeroes the padding rows.
// fill is one input's tensor fill: input i's columns, the kept rows, the
// padded row count and the values per row.
type fill struct {
	bufs          *batchBufs
	i             int
	in            *input
	cols          []colRef
	rows          []int
	padded, width int
}

func fillInput[D elem](f fill) []D {
	bufs, i, in, cols, rows, padded, w := f.bufs, f.i, f.in, f.cols, f.rows, f.padded, f.width
	dst, _ := bufs.data[i].([]D)
	dst = grow(dst, padded*w)
	if in.list != "" {
		ll := cols[0].arr.(array.ListLike)
		starts := grow(bufs.starts, len(rows))
		for k, r := range rows {
			s, _ := ll.ValueOffsets(r)
			starts[k] = int(s)
		}
		bufs.starts = starts
		fillList(dst, w, cols[0].child, starts)
	} else {
		// Row blocks, every column within each: a block's rows of dst
		// stay in cache while its columns are written, where a whole
		// column at a time strides through all of dst once per column.
		ident := len(cols) > 0 && len(rows) == cols[0].arr.Len()
		if d, ok := any(dst).([]float32); ok && ident && transposeFloat32s(d, w, cols, len(rows)) {
			clear(dst[len(rows)*w:])
			return dst
		}
		for lo := 0; lo < len(rows); lo += gatherBlock {
			blk := span{lo: lo, hi: min(lo+gatherBlock, len(rows)), ident: ident}
			for j, c := range cols {
				fillColumn(dst, w, j, c.arr, rows, blk)
			}
		}
	}
	clear(dst[len(rows)*w:])
	return dst
}

// transposeFloat32s is fillInput's transpose for the usual input, float32
// columns into a float32 tensor with every row kept: four columns at a
// time, row by row, so each row's four values are written side by side
// with no type switch or row index per value. It reports false, writing
// nothing, when a column is not float32.
func transposeFloat32s(dst []float32, k int, cols []colRef, n int) bool {
	if len(cols) != k {
		return false
	}
	src := make([][]float32, k)
	for j, c := range cols {
		a, ok := c.arr.(*array.Float32)
		if !ok {
			return false
		}
		src[j] = a.Float32Values()[:n]
	}
	for lo := 0; lo < n; lo += gatherBlock {
		hi := min(lo+gatherBlock, n)
		d := dst[lo*k : hi*k]
		j := 0
		for ; j+4 <= k; j += 4 {
			c0, c1, c2, c3 := src[j][lo:hi], src[j+1][lo:hi], src[j+2][lo:hi], src[j+3][lo:hi]
			for r, v := range c0 {
				o := d[r*k+j : r*k+j+4 : r*k+j+4]
				o[0], o[1], o[2], o[3] = v, c1[r], c2[r], c3[r]
			}
		}
		for ; j < k; j++ {
			for r, v := range src[j][lo:hi] {
				d[r*k+j] = v
			}
		}
	}
	return true
}

// gatherBlock is the rows per block of fillInput's transpose: 256 rows of
// 16 float32 features are 16 KiB of the tensor, within any L1 cache.
const gatherBlock = 256

// span is the block of kept rows [lo, hi) that fillColumn writes; ident
// says the kept rows are all the batch's rows (rows[i] == i).
type span struct {
	lo, hi int
	ident  bool
}

// fillColumn writes column j of a [rows, k] tensor for the kept rows of b.
func fillColumn[D elem](dst []D, k, j int, arr arrow.Array, rows []int, b span) {
	switch a := arr.(type) {
	case *array.Float32:
		gather(dst, k, j, a.Float32Values(), rows, b)
	case *array.Float64:
		gather(dst, k, j, a.Float64Values(), rows, b)
	case *array.Int8:
		gather(dst, k, j, a.Int8Values(), rows, b)
	case *array.Int16:
		gather(dst, k, j, a.Int16Values(), rows, b)
	case *array.Int32:
		gather(dst, k, j, a.Int32Values(), rows, b)
	case *array.Int64:
		gather(dst, k, j, a.Int64Values(), rows, b)
	case *array.Uint8:
		gather(dst, k, j, a.Uint8Values(), rows, b)
	case *array.Uint16:
		gather(dst, k, j, a.Uint16Values(), rows, b)
	case *array.Uint32:
		gather(dst, k, j, a.Uint32Values(), rows, b)
	case *array.Uint64:
		gather(dst, k, j, a.Uint64Values(), rows, b)
	}
}

func gather[S number, D elem](dst []D, k, j int, src []S, rows []int, b span) {
	d := dst[b.lo*k : b.hi*k]
	if b.ident { // nothing rejected: rows is the identity
		for r, v := range src[b.lo:b.hi] {
			d[r*k+j] = D(v)
		}
		return
	}
	for i, r := range rows[b.lo:b.hi] {
		d[i*k+j] = D(src[r])
	}
}

// fillList copies w child values starting at each of starts into [rows, w].
func fillList[D elem](dst []D, w int, child arrow.Array, starts []int) {
	switch a := child.(type) {
	case *array.Float32:
		gatherRuns(dst, w, a.Float32Values(), starts)
	case *array.Float64:
		gatherRuns(dst, w, a.Float64Values(), starts)
	case *array.Int8:
		gatherRuns(dst, w, a.Int8Values(), starts)
	case *array.Int16:
		gatherRuns(dst, w, a.Int16Values(), starts)
	case *array.Int32:
		gatherRuns(dst, w, a.Int32Values(), starts)
	case *array.Int64:
		gatherRuns(dst, w, a.Int64Values(), starts)
	case *array.Uint8:
		gatherRuns(dst, w, a.Uint8Values(), starts)
	case *array.Uint16:
		gatherRuns(dst, w, a.Uint16Values(), starts)
	case *array.Uint32:
		gatherRuns(dst, w, a.Uint32Values(), starts)
	case *array.Uint64:
		gatherRuns(dst, w, a.Uint64Values(), starts)
	}
}

func gatherRuns[S number, D elem](dst []D, w int, src []S, starts []int) {
	for i, s := range starts {
		d := dst[i*w : (i+1)*w]
		for x, v := range src[s : s+w] {
			d[x] = D(v)
		}
	}
}

// scanner calls fn for each index in [lo, hi) whose value cannot be fed,
// with the reason ("null", "NaN", "+Inf", "3000000000 out of range for
// int32"); fn returns false to stop.
type scanner func(lo, hi int, fn func(i int, why string) bool)

// scan returns the scanner of a numeric array for an input of kind k. The
// array's type must have passed checkScalarType.
func scan(arr arrow.Array, k elemKind) scanner {
	switch a := arr.(type) {
	case *array.Float32:
		lim := float32(math.MaxFloat32)
		return floatScanner(arr, a.Float32Values(), lim)
	case *array.Float64:
		lim := math.MaxFloat64
		if k == kindFloat32 {
			lim = math.MaxFloat32
		}
		return floatScanner(arr, a.Float64Values(), lim)
	case *array.Int8:
		return intScanner(arr, a.Int8Values(), k)
	case *array.Int16:
		return intScanner(arr, a.Int16Values(), k)
	case *array.Int32:
		return intScanner(arr, a.Int32Values(), k)
	case *array.Int64:
		return intScanner(arr, a.Int64Values(), k)
	case *array.Uint8:
		return uintScanner(arr, a.Uint8Values(), k)
	case *array.Uint16:
		return uintScanner(arr, a.Uint16Values(), k)
	case *array.Uint32:
		return uintScanner(arr, a.Uint32Values(), k)
	case *array.Uint64:
		return uintScanner(arr, a.Uint64Values(), k)
	}
	return func(lo, hi int, fn func(int, string) bool) {
		for i := lo; i < hi; i++ {
			if !fn(i, "unsupported type "+arr.DataType().String()) {
				return
			}
		}
	}
}

func floatWhy(f float64, lim float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	if lim == math.MaxFloat32 {
		return fmt.Sprintf("%g out of range for float32", f)
	}
	return fmt.Sprintf("%g out of range", f)
}

func floatScanner[S float32 | float64](arr arrow.Array, src []S, lim S) scanner {
	nulls := arr.NullN() > 0
	return func(lo, hi int, fn func(int, string) bool) {
		if !nulls && allWithin(src[lo:hi], lim) {
			return
		}
		for i := lo; i < hi; i++ {
			if nulls && arr.IsNull(i) {
				if !fn(i, "null") {
					return
				}
				continue
			}
			// The negated range test also catches NaN.
			if v := src[i]; !(v >= -lim && v <= lim) {
				if !fn(i, floatWhy(float64(v), float64(lim))) {
					return
				}
			}
		}
	}
}

// allWithin reports whether every value of src is within [-lim, lim] (none
// NaN or infinite) for a positive finite lim. The magnitude bits of IEEE
// floats order as their values do, a NaN's above every other's, so a value
// is out exactly when lim's bits minus its magnitude's wraps below zero,
// setting the top bit: OR-ing those differences over four independent
// accumulators tests a clean column without a branch or a max chain per
// value (16M values per 1M rows of 16 features: 12 -> 4 ms of a null-model
// job), and the per-value test then runs only where this fails.
func allWithin[S float32 | float64](src []S, lim S) bool {
	switch s := any(src).(type) {
	case []float32:
		const mag = 1<<31 - 1
		l := math.Float32bits(float32(lim))
		var a0, a1, a2, a3 uint32
		i := 0
		for ; i+4 <= len(s); i += 4 {
			q := s[i : i+4 : i+4]
			a0 |= l - math.Float32bits(q[0])&mag
			a1 |= l - math.Float32bits(q[1])&mag
			a2 |= l - math.Float32bits(q[2])&mag
			a3 |= l - math.Float32bits(q[3])&mag
		}
		for _, v := range s[i:] {
			a0 |= l - math.Float32bits(v)&mag
		}
		return (a0|a1|a2|a3)>>31 == 0
	case []float64:
		const mag = 1<<63 - 1
		l := math.Float64bits(float64(lim))
		var a0, a1, a2, a3 uint64
		i := 0
		for ; i+4 <= len(s); i += 4 {
			q := s[i : i+4 : i+4]
			a0 |= l - math.Float64bits(q[0])&mag
			a1 |= l - math.Float64bits(q[1])&mag
			a2 |= l - math.Float64bits(q[2])&mag
			a3 |= l - math.Float64bits(q[3])&mag
		}
		for _, v := range s[i:] {
			a0 |= l - math.Float64bits(v)&mag
		}
		return (a0|a1|a2|a3)>>63 == 0
	}
	return false
}

// intLimit is the largest value an integer input of kind k holds; 0 for
// float inputs, which take any integer (rounding large ones).
func intLimit(k elemKind) int64 {
	switch k {
	case kindInt32:
		return math.MaxInt32
	case kindInt64:
		return math.MaxInt64
	}
	return 0
}

func intScanner[S ~int8 | ~int16 | ~int32 | ~int64](arr arrow.Array, src []S, k elemKind) scanner {
	nulls := arr.NullN() > 0
	var z S
	// Only int64 values can overflow an int32 input.
	check := k == kindInt32 && unsafe.Sizeof(z) == 8
	return func(a, b int, fn func(int, string) bool) {
		for i := a; i < b; i++ {
			if nulls && arr.IsNull(i) {
				if !fn(i, "null") {
					return
				}
				continue
			}
			if check {
				if v := int64(src[i]); v < math.MinInt32 || v > math.MaxInt32 {
					if !fn(i, fmt.Sprintf("%d out of range for %s", v, k)) {
						return
					}
				}
			}
		}
	}
}

func uintScanner[S ~uint8 | ~uint16 | ~uint32 | ~uint64](arr arrow.Array, src []S, k elemKind) scanner {
	nulls := arr.NullN() > 0
	var z S
	size := unsafe.Sizeof(z)
	check := (k == kindInt32 && size >= 4) || (k == kindInt64 && size == 8)
	limit := uint64(intLimit(k))
	return func(a, b int, fn func(int, string) bool) {
		for i := a; i < b; i++ {
			if nulls && arr.IsNull(i) {
				if !fn(i, "null") {
					return
				}
				continue
			}
			if check {
				if v := uint64(src[i]); v > limit {
					if !fn(i, fmt.Sprintf("%d out of range for %s", v, k)) {
						return
					}
				}
			}
		}
	}
}

// firstListLen is the length of the first non-null list, the width of a
// list input whose model dimension is dynamic; 0 when every row is null.
func firstListLen(ll array.ListLike) int {
	for r := range ll.Len() {
		if ll.IsValid(r) {
			s, e := ll.ValueOffsets(r)
			return int(e - s)
		}
	}
	return 0
}

// checkList rejects null lists, lists whose length is not w, and lists
// holding a value that cannot be fed; child is ll's values as numbers.
func checkList(ll array.ListLike, child arrow.Array, in *input, w int, reject func(row int, col, reason string)) {
	name := in.list
	sc := scan(child, in.kind)
	nulls := ll.NullN() > 0
	for r := range ll.Len() {
		if nulls && ll.IsNull(r) {
			reject(r, name, "column "+name+": null")
			continue
		}
		s, e := ll.ValueOffsets(r)
		if n := int(e - s); n != w || w == 0 {
			reject(r, name, fmt.Sprintf("column %s: length %d, want %d", name, n, w))
			continue
		}
		start := int(s)
		sc(start, start+w, func(i int, why string) bool {
			reject(r, name, fmt.Sprintf("column %s[%d]: %s", name, i-start, why))
			return false
		})
	}
}
