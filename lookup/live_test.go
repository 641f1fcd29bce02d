package lookup

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/runner/model"
)

// listModel answers each row with a top-3 list computed from its one
// float32 input, like the recs model's two lists, and counts the rows it
// was asked to infer.
type listModel struct{ rows atomic.Int64 }

func (m *listModel) Version() string  { return "v-list" }
func (m *listModel) Info() model.Info { return model.Info{} }
func (m *listModel) Close() error     { return nil }

func (m *listModel) Predict(_ context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, []string, error) {
	m.rows.Add(rec.NumRows())
	in := rec.Column(1).(*array.Float32)
	items := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64)
	defer items.Release()
	scores := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Float32)
	defer scores.Release()
	for i := 0; i < in.Len(); i++ {
		f := in.Value(i)
		items.Append(true)
		scores.Append(true)
		for j := range 3 {
			items.ValueBuilder().(*array.Int64Builder).Append(int64(f*1000) + int64(j))
			scores.ValueBuilder().(*array.Float32Builder).Append(f / float32(j+3))
		}
	}
	ia, sa := items.NewArray(), scores.NewArray()
	defer ia.Release()
	defer sa.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "items", Type: ia.DataType()}, {Name: "scores", Type: sa.DataType()}}, nil)
	return array.NewRecordBatch(schema, []arrow.Array{ia, sa}, int64(in.Len())), nil, nil
}

func listLayout() *layout {
	return &layout{
		key:   "id",
		cols:  []layoutCol{{name: "f", elem: arrow.PrimitiveTypes.Float32, width: 1}},
		byCol: map[string]int{"f": 0},
		schema: arrow.NewSchema([]arrow.Field{
			{Name: "id", Type: arrow.BinaryTypes.String},
			{Name: "f", Type: arrow.PrimitiveTypes.Float32},
		}, nil),
	}
}

func listRow(key string, f float64) row { return row{key: key, vals: [][]float64{{f}}} }

// wantListRecord is the record of listModel for input f, built with
// encoding/json from the same float32 values.
func wantListRecord(t *testing.T, f float32) map[string]any {
	t.Helper()
	var items []int64
	var scores []float32
	for j := range 3 {
		items = append(items, int64(f*1000)+int64(j))
		scores = append(scores, f/float32(j+3))
	}
	b, _ := json.Marshal(map[string]any{"items": items, "scores": scores})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLiveRunSharesIdenticalRows: identical rows of one batch (same key,
// same inputs) are inferred once and get the same record; the same key
// with other inputs is its own row; every record is its own capped slice
// of the batch's buffer, and equals the encoding/json rendering of the
// model's lists.
func TestLiveRunSharesIdenticalRows(t *testing.T) {
	m := &listModel{}
	lv := &live{ns: "t", layout: listLayout(), model: m}
	rows := []row{listRow("a", 0.5), listRow("b", 0.25), listRow("a", 0.5), listRow("a", 0.75), listRow("a", 0.5)}
	res, err := lv.run(context.Background(), rows)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.rows.Load(); got != 3 {
		t.Errorf("model inferred %d rows, want 3 (a/0.5, b/0.25, a/0.75)", got)
	}
	if len(res) != len(rows) {
		t.Fatalf("%d results for %d rows", len(res), len(rows))
	}
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("row %d: %v", i, r.err)
		}
		if cap(r.rec) != len(r.rec) {
			t.Errorf("row %d: record has spare capacity %d: an append would overwrite the next record", i, cap(r.rec)-len(r.rec))
		}
		var got map[string]any
		if err := json.Unmarshal(r.rec, &got); err != nil {
			t.Fatalf("row %d: %v: %s", i, err, r.rec)
		}
		if got["model_version"] != "v-list" {
			t.Errorf("row %d: model_version %v", i, got["model_version"])
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["computed_at"])); err != nil {
			t.Errorf("row %d: computed_at: %v", i, err)
		}
		want := wantListRecord(t, float32(rows[i].vals[0][0]))
		for _, f := range []string{"items", "scores"} {
			if fmt.Sprint(got[f]) != fmt.Sprint(want[f]) {
				t.Errorf("row %d %s: %v, want %v", i, f, got[f], want[f])
			}
		}
	}
	if string(res[0].rec) != string(res[2].rec) || string(res[0].rec) != string(res[4].rec) {
		t.Errorf("identical rows got different records")
	}
	if string(res[0].rec) == string(res[3].rec) {
		t.Errorf("key a with other inputs got the same record")
	}
}

// TestArrowJSONListFastPath: a list of float32 or int64 without nulls
// (read from the values' slice) renders as the element-by-element path
// does, and a list with a null still renders it.
func TestArrowJSONListFastPath(t *testing.T) {
	for _, typ := range []arrow.DataType{arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Int64} {
		b := array.NewListBuilder(memory.DefaultAllocator, typ)
		for r := range 3 {
			b.Append(true)
			for j := range 4 {
				switch vb := b.ValueBuilder().(type) {
				case *array.Float32Builder:
					vb.Append(float32(r)/3 + float32(j)*1e-7)
				case *array.Int64Builder:
					vb.Append(int64(r*100 - j))
				}
			}
		}
		a := b.NewArray().(*array.List)
		b.Release()
		vals := a.ListValues()
		for r := range 3 {
			fast, err := arrowJSON(nil, a, r)
			if err != nil {
				t.Fatal(err)
			}
			start, end := a.ValueOffsets(r)
			slow := []byte{'['}
			for j := start; j < end; j++ {
				if j > start {
					slow = append(slow, ',')
				}
				if slow, err = arrowJSON(slow, vals, int(j)); err != nil {
					t.Fatal(err)
				}
			}
			slow = append(slow, ']')
			if string(fast) != string(slow) {
				t.Errorf("%s row %d: %s, element by element %s", typ, r, fast, slow)
			}
		}
		a.Release()
	}
	nb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Float32)
	nb.Append(true)
	nb.ValueBuilder().(*array.Float32Builder).Append(1.5)
	nb.ValueBuilder().AppendNull()
	na := nb.NewArray()
	nb.Release()
	defer na.Release()
	if got, err := arrowJSON(nil, na, 0); err != nil || string(got) != "[1.5,null]" {
		t.Errorf("list with a null: %s, %v; want [1.5,null]", got, err)
	}
}
