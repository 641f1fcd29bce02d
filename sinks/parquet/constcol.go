package parquet

import (
	"bytes"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// constStrings hands the Parquet writer the dictionary-encoded string
// columns whose batch holds one value on every row (model_version and run
// parameters, the same on every row of a run) as Arrow dictionary arrays of
// that one value with all-zero indices. arrow-go then puts the dictionary
// once per column chunk and run-length encodes the indices, where a plain
// string array is hashed row by row into the dictionary (11% of a
// null-model job's CPU). The file is the same: the column stays a
// dictionary-encoded BYTE_ARRAY with the run schema's String type.
type constStrings struct {
	cols []int // the schema's dictionary-encoded string columns
	// dict[i] is the one-value dictionary of cols[i] (nil until its first
	// constant batch); reusing the same array lets arrow-go skip comparing
	// it with the chunk's dictionary on every write.
	dict []*array.String
	// dense[i]: cols[i] got a batch that was not one value, or a second
	// value; it is written as is from then on, since arrow-go cannot put a
	// dictionary into a column chunk that already hashed values.
	dense []bool
	zeros *array.Int32 // all-zero indices, sliced to each batch's length
}

// newConstStrings covers the columns of schema that the writer
// dictionary-encodes (dictCols).
func newConstStrings(dictCols []int) *constStrings {
	return &constStrings{cols: dictCols, dict: make([]*array.String, len(dictCols)), dense: make([]bool, len(dictCols))}
}

var dictOfStrings = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}

// columns returns batch's columns with each constant string column replaced
// by its dictionary array, and a release for the arrays it made. It returns
// batch.Columns() itself when no column was replaced.
func (c *constStrings) columns(batch arrow.RecordBatch) ([]arrow.Array, func()) {
	var out []arrow.Array
	var made []arrow.Array
	for i, col := range c.cols {
		if c.dense[i] {
			continue
		}
		s, ok := batch.Column(col).(*array.String)
		if !ok {
			c.dense[i] = true
			continue
		}
		v, ok := oneValue(s)
		if !ok || c.dict[i] != nil && c.dict[i].Value(0) != v {
			c.dense[i] = true
			continue
		}
		if c.dict[i] == nil {
			b := array.NewStringBuilder(memory.DefaultAllocator)
			b.Append(v)
			c.dict[i] = b.NewStringArray()
			b.Release()
		}
		if out == nil {
			out = append([]arrow.Array(nil), batch.Columns()...)
		}
		idx := c.indices(s.Len())
		d := array.NewDictionaryArray(dictOfStrings, idx, c.dict[i])
		idx.Release()
		out[col] = d
		made = append(made, d)
	}
	if out == nil {
		return batch.Columns(), func() {}
	}
	return out, func() {
		for _, a := range made {
			a.Release()
		}
	}
}

// indices returns n zero indices (a slice of c.zeros, grown as needed); the
// caller releases it.
func (c *constStrings) indices(n int) arrow.Array {
	if c.zeros == nil || c.zeros.Len() < n {
		if c.zeros != nil {
			c.zeros.Release()
		}
		size := max(n, 1024)
		buf := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(make([]int32, size)))
		c.zeros = array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, size, []*memory.Buffer{nil, buf}, nil, 0, 0))
	}
	return array.NewSlice(c.zeros, 0, int64(n))
}

// release drops the arrays c holds.
func (c *constStrings) release() {
	for i, d := range c.dict {
		if d != nil {
			d.Release()
			c.dict[i] = nil
		}
	}
	if c.zeros != nil {
		c.zeros.Release()
		c.zeros = nil
	}
}

// oneValue reports whether every row of s holds the same non-null value,
// and which: equal-length values whose bytes repeat with that period, a
// comparison of the offsets and one of the bytes, no hashing.
func oneValue(s *array.String) (string, bool) {
	n := s.Len()
	if n == 0 || s.NullN() > 0 {
		return "", false
	}
	offs := s.ValueOffsets()
	base, l := int64(offs[0]), int64(offs[1]-offs[0])
	for i, o := range offs {
		if int64(o) != base+int64(i)*l {
			return "", false
		}
	}
	b := s.ValueBytes()
	if !bytes.Equal(b[l:], b[:int64(len(b))-l]) {
		return "", false
	}
	return s.Value(0), true
}

// relabeled is a record batch that reports the run's schema but hands the
// writer other arrays (dictionary arrays for String fields): pqarrow
// requires the record's schema to equal the file's, and arrow-go's own
// record checks each column's type against it.
type relabeled struct {
	arrow.RecordBatch
	cols []arrow.Array
}

func (r relabeled) Columns() []arrow.Array   { return r.cols }
func (r relabeled) Column(i int) arrow.Array { return r.cols[i] }
