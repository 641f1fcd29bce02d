package sinktest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Row is one record as a reader sees it, field name → canonical value (see
// Canon). The key column is included.
type Row map[string]any

// Column names of the suite's schema besides the key.
const (
	ColScore = "score" // float32
	ColItems = "items" // list<int64>
	ColEmb   = "emb"   // list<float32>
	ColDate  = "date"  // the run parameter
)

// Key column names for integer and string keys.
const (
	IntKey    = "user_id"
	StringKey = "user_key"
)

// NewRun returns a RunInfo over the suite's output schema: the key (int64
// user_id, or string user_key when stringKey), score float32, items
// list<int64>, emb list<float32>, model_version, computed_at and one string
// column per parameter (sorted by name), as the runner builds it.
func NewRun(version string, stringKey bool, params map[string]string) sinks.RunInfo {
	key, kt := IntKey, arrow.DataType(arrow.PrimitiveTypes.Int64)
	if stringKey {
		key, kt = StringKey, arrow.BinaryTypes.String
	}
	fields := append([]arrow.Field{
		{Name: key, Type: kt},
		{Name: ColScore, Type: arrow.PrimitiveTypes.Float32},
		{Name: ColItems, Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: ColEmb, Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	}, jobs.OutputTail()...)
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fields = append(fields, arrow.Field{Name: k, Type: arrow.BinaryTypes.String})
	}
	return sinks.RunInfo{
		Job:     "sinktest",
		RunID:   "run-" + version,
		Version: version,
		Params:  params,
		Schema:  arrow.NewSchema(fields, nil),
		Key:     key,
	}
}

// salt derives a per-version number so that two runs' rows differ in every
// field and a mix of runs is visible in any single row.
func salt(version string) int {
	h := fnv.New32a()
	h.Write([]byte(version))
	return int(h.Sum32() % 1000)
}

// KeyOf is the key of row i as a reader reports it (Snapshot.Rows key).
func KeyOf(run sinks.RunInfo, i int) string {
	if run.Key == StringKey {
		return fmt.Sprintf("user-%d", i)
	}
	return strconv.FormatInt(int64(i)*7+1, 10)
}

// ComputedAt is the computed_at of every row of run: microsecond precision,
// distinct per version.
func ComputedAt(run sinks.RunInfo) time.Time {
	return time.Date(2024, 11, 1, 12, 30, 0, 123456000, time.UTC).Add(time.Duration(salt(run.Version)) * time.Second)
}

// ModelVersion is the model_version of every row of run.
func ModelVersion(run sinks.RunInfo) string { return "model-" + run.Version }

// row i's field values, with extra added to the numeric outputs (a bad
// attempt's data differs from the committed one's).
func rowValues(run sinks.RunInfo, i, extra int) (score float32, items []int64, emb []float32) {
	s := salt(run.Version) + extra
	score = float32(i)/4 + float32(s)
	items = make([]int64, i%4) // includes empty lists
	for j := range items {
		items[j] = int64(i*10+j) + int64(s)*1_000_000
	}
	emb = []float32{float32(i) / 8, -float32(s), float32(j3(i))}
	return score, items, emb
}

func j3(i int) float32 { return float32(i%3) - 0.5 }

// Batch returns rows [from, to) of run as one record batch with run.Schema.
// The caller releases it.
func Batch(run sinks.RunInfo, from, to int) arrow.RecordBatch {
	return batch(run, from, to, 0)
}

func batch(run sinks.RunInfo, from, to, extra int) arrow.RecordBatch {
	return batchWith(memory.DefaultAllocator, run, from, to, extra)
}

// batchWith is batch with its buffers from mem.
func batchWith(mem memory.Allocator, run sinks.RunInfo, from, to, extra int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, run.Schema)
	defer b.Release()
	at := arrow.Timestamp(ComputedAt(run).UnixMicro())
	for i := from; i < to; i++ {
		score, items, emb := rowValues(run, i, extra)
		for c, f := range run.Schema.Fields() {
			fb := b.Field(c)
			switch f.Name {
			case run.Key:
				if run.Key == StringKey {
					fb.(*array.StringBuilder).Append(KeyOf(run, i))
				} else {
					fb.(*array.Int64Builder).Append(int64(i)*7 + 1)
				}
			case ColScore:
				fb.(*array.Float32Builder).Append(score)
			case ColItems:
				lb := fb.(*array.ListBuilder)
				lb.Append(true)
				lb.ValueBuilder().(*array.Int64Builder).AppendValues(items, nil)
			case ColEmb:
				lb := fb.(*array.ListBuilder)
				lb.Append(true)
				lb.ValueBuilder().(*array.Float32Builder).AppendValues(emb, nil)
			case sinks.ColModelVersion:
				fb.(*array.StringBuilder).Append(ModelVersion(run))
			case sinks.ColComputedAt:
				fb.(*array.TimestampBuilder).Append(at)
			default:
				fb.(*array.StringBuilder).Append(run.Params[f.Name])
			}
		}
	}
	return b.NewRecordBatch()
}

// Want returns rows [from, to) of run as a reader must see them, by key.
func Want(run sinks.RunInfo, from, to int) map[string]Row {
	out := make(map[string]Row, to-from)
	for i := from; i < to; i++ {
		score, items, emb := rowValues(run, i, 0)
		r := Row{
			ColScore:              score,
			ColItems:              items,
			ColEmb:                emb,
			sinks.ColModelVersion: ModelVersion(run),
			sinks.ColComputedAt:   ComputedAt(run),
		}
		if run.Key == StringKey {
			r[run.Key] = KeyOf(run, i)
		} else {
			r[run.Key] = int64(i)*7 + 1
		}
		for k, v := range run.Params {
			r[k] = v
		}
		out[KeyOf(run, i)] = r
	}
	return out
}

// Canon converts a value a reader decoded for a column of type dt into the
// canonical form rows are compared in:
//
//	integers → int64; float32 → float32; float64 → float64; strings → string;
//	bool → bool; timestamps → time.Time in UTC; lists → []int64, []float32,
//	[]float64 or []string; null → nil.
//
// It accepts what JSON decoding (float64, json.Number, []any, RFC 3339
// strings, integer microseconds), pgx (time.Time, typed slices) and Arrow
// produce.
func Canon(dt arrow.DataType, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch dt.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return toInt64(v)
	case arrow.FLOAT32:
		f, err := toFloat64(v)
		return float32(f), err
	case arrow.FLOAT64:
		return toFloat64(v)
	case arrow.STRING, arrow.LARGE_STRING:
		switch s := v.(type) {
		case string:
			return s, nil
		case []byte:
			return string(s), nil
		}
	case arrow.BOOL:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case arrow.TIMESTAMP:
		switch x := v.(type) {
		case time.Time:
			return x.UTC(), nil
		case string:
			t, err := time.Parse(time.RFC3339Nano, x)
			if err != nil {
				return nil, fmt.Errorf("timestamp %q: %w", x, err)
			}
			return t.UTC(), nil
		default:
			us, err := toInt64(v)
			if err != nil {
				return nil, err
			}
			return time.UnixMicro(us).UTC(), nil
		}
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		elem := dt.(arrow.ListLikeType).Elem()
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
			break
		}
		n := rv.Len()
		switch elem.ID() {
		case arrow.FLOAT32:
			out := make([]float32, n)
			for i := range n {
				f, err := toFloat64(rv.Index(i).Interface())
				if err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				out[i] = float32(f)
			}
			return out, nil
		case arrow.FLOAT64:
			out := make([]float64, n)
			for i := range n {
				f, err := toFloat64(rv.Index(i).Interface())
				if err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				out[i] = f
			}
			return out, nil
		case arrow.STRING, arrow.LARGE_STRING:
			out := make([]string, n)
			for i := range n {
				s, ok := rv.Index(i).Interface().(string)
				if !ok {
					return nil, fmt.Errorf("element %d: %T is not a string", i, rv.Index(i).Interface())
				}
				out[i] = s
			}
			return out, nil
		default:
			out := make([]int64, n)
			for i := range n {
				x, err := toInt64(rv.Index(i).Interface())
				if err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				out[i] = x
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("cannot read %T as %s", v, dt)
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%d overflows int64", x)
		}
		return int64(x), nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, fmt.Errorf("%v is not an exact integer", x)
		}
		return int64(x), nil
	case json.Number:
		return x.Int64()
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("cannot read %T as an integer", v)
}

func toFloat64(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	case json.Number:
		return x.Float64()
	case string:
		return strconv.ParseFloat(x, 64)
	}
	return 0, fmt.Errorf("cannot read %T as a float", v)
}

// RowsFromRecord appends the rows of rec to rows, keyed by the key column's
// value as a string, and returns how many rows rec held. Readers built on
// Arrow (the Parquet sink's) use it.
func RowsFromRecord(rec arrow.RecordBatch, key string, rows map[string]Row) (int, error) {
	sc := rec.Schema()
	ki := sc.FieldIndices(key)
	if len(ki) != 1 {
		return 0, fmt.Errorf("record has no single key column %q (schema %s)", key, sc)
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		row := Row{}
		for c, f := range sc.Fields() {
			v, err := Canon(f.Type, arrowValue(rec.Column(c), r))
			if err != nil {
				return 0, fmt.Errorf("row %d column %s: %w", r, f.Name, err)
			}
			row[f.Name] = v
		}
		rows[fmt.Sprint(row[key])] = row
	}
	return int(rec.NumRows()), nil
}

// arrowValue returns element i of a as a plain Go value.
func arrowValue(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch x := a.(type) {
	case *array.Int64:
		return x.Value(i)
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Float32:
		return x.Value(i)
	case *array.Float64:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	case *array.Boolean:
		return x.Value(i)
	case *array.Timestamp:
		unit := x.DataType().(*arrow.TimestampType).Unit
		return x.Value(i).ToTime(unit)
	case array.ListLike:
		start, end := x.ValueOffsets(i)
		vals := x.ListValues()
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			out = append(out, arrowValue(vals, int(j)))
		}
		return out
	}
	return a.ValueStr(i)
}

// diffRows describes how got differs from want ("" when equal).
func diffRows(got, want map[string]Row) string {
	var b strings.Builder
	n := 0
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			if n < 5 {
				fmt.Fprintf(&b, "\n  missing key %s", k)
			}
			n++
			continue
		}
		if !reflect.DeepEqual(normRow(g), normRow(w)) {
			if n < 5 {
				fmt.Fprintf(&b, "\n  key %s: got %v\n  %*s want %v", k, g, len(k)+4, "", w)
			}
			n++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if n < 5 {
				fmt.Fprintf(&b, "\n  unexpected key %s", k)
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d/%d rows differ:%s", n, len(got), len(want), b.String())
}

// normRow makes empty and nil lists compare equal and times compare by
// instant.
func normRow(r Row) Row {
	out := make(Row, len(r))
	for k, v := range r {
		switch x := v.(type) {
		case []int64:
			if len(x) == 0 {
				v = []int64{}
			}
		case []float32:
			if len(x) == 0 {
				v = []float32{}
			}
		case time.Time:
			v = x.UTC().Format(time.RFC3339Nano)
		}
		out[k] = v
	}
	return out
}
