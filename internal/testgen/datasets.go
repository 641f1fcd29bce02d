package testgen

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	aparquet "github.com/apache/arrow-go/v18/parquet"
	acompress "github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// KeyColumn is the entity key column of every generated dataset.
const KeyColumn = "user_id"

// ListColumn is the fixed-size-list feature column (all features of a row).
const ListColumn = "features"

// FeatureColumn names the scalar column of feature i: f0, f1, ….
func FeatureColumn(i int) string { return "f" + strconv.Itoa(i) }

// KeyString is the string form of a key used by string-keyed datasets.
func KeyString(key int64) string { return "user-" + strconv.FormatInt(key, 10) }

// Features returns the dim feature values of key: uniform in [-1, 1),
// reproducible from (seed, key) alone so tests compute expected predictions
// from a key without reading the dataset.
func Features(seed uint64, key int64, dim int) []float32 {
	r := rand.New(rand.NewPCG(seed, uint64(key)))
	f := make([]float32, dim)
	for i := range f {
		f[i] = float32(2*r.Float64() - 1)
	}
	return f
}

// Writer selects the Parquet library that writes a dataset; readers must
// cope with files from either, as users bring files from many tools.
type Writer string

// The supported Parquet writers.
const (
	WriterParquetGo Writer = "parquet-go"
	WriterArrow     Writer = "arrow"
)

// Codec is a Parquet compression codec name.
type Codec string

// The supported codecs.
const (
	CodecNone   Codec = "none"
	CodecSnappy Codec = "snappy"
	CodecZstd   Codec = "zstd"
	CodecGzip   Codec = "gzip"
)

// Layout chooses how features are stored.
type Layout string

// The feature layouts.
const (
	// LayoutColumns stores one nullable scalar column per feature, f0…f{dim-1}.
	LayoutColumns Layout = "columns"
	// LayoutList stores one FixedSizeList<float32>[dim] column `features`
	// (arrow writer) or a plain list (parquet-go, which has no fixed size).
	LayoutList Layout = "list"
	// LayoutBoth stores both, with equal values.
	LayoutBoth Layout = "both"
)

// BadKind says how a row was deliberately damaged.
type BadKind int

// The kinds of bad rows.
const (
	BadNone BadKind = iota
	BadNull         // feature BadColumn is null
	BadNaN          // feature BadColumn is NaN
	BadInf          // feature BadColumn is +Inf
)

func (k BadKind) String() string {
	return [...]string{"ok", "null", "nan", "inf"}[k]
}

// Dataset describes a generated Parquet dataset. The zero value of each field
// takes the default noted beside it; Defaults fills them in.
type Dataset struct {
	Seed       uint64 // feature seed (Features)
	StringKeys bool   // user_id as "user-42" instead of int64 42
	Dim        int    // features per row; default 16
	Layout     Layout // default LayoutBoth
	// Mixed stores scalar feature columns with mixed widths to exercise
	// conversion: odd columns float64, the last column int32 holding
	// round(100·value); Row reports the values as a reader converts them.
	Mixed bool

	Dates         []string // partitions dt=DATE; none: files directly in the directory
	Disjoint      bool     // partitions hold different keys; default: every date holds the same keys
	FilesPerDate  int      // default 1
	RowsPerFile   int64    // default 1000; 0 rows is possible via WriteEmpty
	RowsPerGroup  int64    // default min(RowsPerFile, 100000)
	BadFraction   float64  // share of rows with a null/NaN/+Inf feature
	Writer        Writer   // default WriterParquetGo
	Codec         Codec    // default CodecSnappy
	Dictionary    bool     // dictionary-encode every column
	DataPageV2    bool     // data page v2 instead of v1
	FilePrefix    string   // default "part-"
	KeyOffsetBase int64    // first key; default 0
}

// Defaults returns d with every unset field at its default.
func (d Dataset) Defaults() Dataset {
	if d.Dim == 0 {
		d.Dim = 16
	}
	if d.Layout == "" {
		d.Layout = LayoutBoth
	}
	if d.FilesPerDate == 0 {
		d.FilesPerDate = 1
	}
	if d.RowsPerFile == 0 {
		d.RowsPerFile = 1000
	}
	if d.RowsPerGroup <= 0 {
		d.RowsPerGroup = min(max(d.RowsPerFile, 1), 100000)
	}
	if d.Writer == "" {
		d.Writer = WriterParquetGo
	}
	if d.Codec == "" {
		d.Codec = CodecSnappy
	}
	if d.FilePrefix == "" {
		d.FilePrefix = "part-"
	}
	return d
}

func (d Dataset) validate() error {
	if d.Dim < 2 {
		return fmt.Errorf("dataset: dim %d: need at least 2 features", d.Dim)
	}
	if d.RowsPerFile < 0 || d.FilesPerDate < 0 {
		return fmt.Errorf("dataset: negative rows per file (%d) or files per date (%d)", d.RowsPerFile, d.FilesPerDate)
	}
	if d.BadFraction < 0 || d.BadFraction > 1 {
		return fmt.Errorf("dataset: bad fraction %g outside [0,1]", d.BadFraction)
	}
	switch d.Layout {
	case LayoutColumns, LayoutList, LayoutBoth:
	default:
		return fmt.Errorf("dataset: unknown layout %q", d.Layout)
	}
	switch d.Writer {
	case WriterParquetGo, WriterArrow:
	default:
		return fmt.Errorf("dataset: unknown writer %q", d.Writer)
	}
	if _, err := pgoCodec(d.Codec); err != nil {
		return err
	}
	return nil
}

// Row is one generated row as a reader should see it.
type Row struct {
	Key       int64
	Features  []float32 // after the conversions of Mixed; NaN where null
	Bad       BadKind
	BadColumn int // feature index damaged when Bad != BadNone
}

// KeyValue is the row's key as stored: int64 or string.
func (r Row) KeyValue(stringKeys bool) any {
	if stringKeys {
		return KeyString(r.Key)
	}
	return r.Key
}

// Row computes the row of key: its features and whether (and how) it is
// bad. Tests use it to know expected outputs and rejected keys.
func (d Dataset) Row(key int64) Row {
	d = d.Defaults()
	f := Features(d.Seed, key, d.Dim)
	if d.Mixed {
		last := d.Dim - 1
		f[last] = float32(math.Round(float64(f[last]) * 100))
	}
	row := Row{Key: key, Features: f}
	if d.BadFraction > 0 {
		h := fnv.New64a()
		var b [16]byte
		for i := 0; i < 8; i++ {
			b[i] = byte(d.Seed >> (8 * i))
			b[8+i] = byte(uint64(key) >> (8 * i))
		}
		h.Write(b[:])
		x := h.Sum64()
		if float64(x>>11)/float64(1<<53) < d.BadFraction {
			// Never the last column, which is int32 in Mixed datasets.
			row.Bad = BadKind(1 + (x>>3)%3)
			row.BadColumn = int((x >> 7) % uint64(d.Dim-1))
			switch row.Bad {
			case BadNull, BadNaN:
				f[row.BadColumn] = float32(math.NaN())
			case BadInf:
				f[row.BadColumn] = float32(math.Inf(1))
			}
		}
	}
	return row
}

// Keys returns the first key and the row count of file `file` of date index
// `date`: files hold consecutive keys.
func (d Dataset) Keys(date, file int) (first, n int64) {
	d = d.Defaults()
	perDate := int64(d.FilesPerDate) * d.RowsPerFile
	first = d.KeyOffsetBase + int64(file)*d.RowsPerFile
	if d.Disjoint {
		first += int64(date) * perDate
	}
	return first, d.RowsPerFile
}

// Result reports what WriteDataset wrote.
type Result struct {
	Files   []string
	Rows    int64
	BadRows int64
	Bytes   int64
}

// WriteDataset writes the dataset under dir (dir/dt=DATE/part-NNNNN.parquet,
// or dir/part-NNNNN.parquet without dates), streaming row group by row group
// so memory is bounded by RowsPerGroup, not the dataset size. Each file is
// written under a temporary name and renamed, so a reader never sees a
// half-written file.
func WriteDataset(dir string, d Dataset) (*Result, error) {
	d = d.Defaults()
	if err := d.validate(); err != nil {
		return nil, err
	}
	dates := d.Dates
	if len(dates) == 0 {
		dates = []string{""}
	}
	res := &Result{}
	for di, date := range dates {
		sub := dir
		if date != "" {
			sub = filepath.Join(dir, "dt="+date)
		}
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
		for fi := 0; fi < d.FilesPerDate; fi++ {
			path := filepath.Join(sub, fmt.Sprintf("%s%05d.parquet", d.FilePrefix, fi))
			first, n := d.Keys(di, fi)
			bad, size, err := writeFile(path, d, first, n)
			if err != nil {
				return nil, err
			}
			res.Files = append(res.Files, path)
			res.Rows += n
			res.BadRows += bad
			res.Bytes += size
		}
	}
	return res, nil
}

// WriteEmpty writes one valid Parquet file with d's schema and no rows.
func WriteEmpty(path string, d Dataset) error {
	d = d.Defaults()
	if err := d.validate(); err != nil {
		return err
	}
	_, _, err := writeFile(path, d, 0, 0)
	return err
}

// Corruption is a way WriteCorrupt damages a file.
type Corruption int

// The corruptions.
const (
	// CorruptTruncated is a valid file cut in half: the footer is missing.
	CorruptTruncated Corruption = iota
	// CorruptGarbage is random bytes between PAR1 magic at both ends, with a
	// footer length pointing into the garbage.
	CorruptGarbage
)

// WriteCorrupt writes a damaged Parquet file at path for bad-input tests.
func WriteCorrupt(path string, c Corruption) error {
	switch c {
	case CorruptTruncated:
		tmp := path + ".full"
		d := Dataset{RowsPerFile: 200}.Defaults()
		if _, _, err := writeFile(tmp, d, 0, d.RowsPerFile); err != nil {
			return err
		}
		defer os.Remove(tmp)
		b, err := os.ReadFile(tmp)
		if err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
		return writeBytes(path, b[:len(b)/2])
	case CorruptGarbage:
		r := rand.New(rand.NewPCG(1, 2))
		b := []byte("PAR1")
		for i := 0; i < 1000; i++ {
			b = append(b, byte(r.Uint32()))
		}
		b = append(b, 0x80, 0x01, 0, 0) // footer length 384
		b = append(b, "PAR1"...)
		return writeBytes(path, b)
	}
	return fmt.Errorf("corrupt %s: unknown corruption %d", path, c)
}

func writeBytes(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("corrupt %s: %w", path, err)
	}
	return nil
}

// chunkRows bounds how many rows are materialised at once inside a row group.
const chunkRows = 8192

// writeFile writes rows [first, first+n) to path and returns the bad-row
// count and file size.
func writeFile(path string, d Dataset, first, n int64) (bad, size int64, err error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, 0, fmt.Errorf("dataset %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	switch d.Writer {
	case WriterArrow:
		// pqarrow closes a sink that is an io.Closer; we close (and check) f ourselves.
		bad, err = writeArrow(struct{ io.Writer }{f}, d, first, n)
	default:
		bad, err = writeParquetGo(f, d, first, n)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("dataset %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return 0, 0, fmt.Errorf("dataset %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return 0, 0, fmt.Errorf("dataset %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("dataset %s: %w", path, err)
	}
	return bad, st.Size(), nil
}

func (d Dataset) hasColumns() bool { return d.Layout != LayoutList }
func (d Dataset) hasList() bool    { return d.Layout != LayoutColumns }

// columnKind is the physical type of scalar feature column i.
func (d Dataset) columnKind(i int) arrow.Type {
	switch {
	case !d.Mixed:
		return arrow.FLOAT32
	case i == d.Dim-1:
		return arrow.INT32
	case i%2 == 1:
		return arrow.FLOAT64
	}
	return arrow.FLOAT32
}

func pgoCodec(c Codec) (compress.Codec, error) {
	switch c {
	case CodecNone:
		return &uncompressed.Codec{}, nil
	case CodecSnappy:
		return &snappy.Codec{}, nil
	case CodecZstd:
		return &zstd.Codec{}, nil
	case CodecGzip:
		return &gzip.Codec{}, nil
	}
	return nil, fmt.Errorf("dataset: unknown codec %q (none, snappy, zstd, gzip)", c)
}

// parquet-go writer -------------------------------------------------------

func writeParquetGo(w io.Writer, d Dataset, first, n int64) (int64, error) {
	leaf := func(node parquet.Node) parquet.Node {
		if d.Dictionary {
			return parquet.Encoded(node, &parquet.RLEDictionary)
		}
		return node
	}
	fields := parquet.Group{}
	if d.StringKeys {
		fields[KeyColumn] = leaf(parquet.String())
	} else {
		fields[KeyColumn] = leaf(parquet.Leaf(parquet.Int64Type))
	}
	if d.hasColumns() {
		for i := 0; i < d.Dim; i++ {
			var t parquet.Type
			switch d.columnKind(i) {
			case arrow.FLOAT64:
				t = parquet.DoubleType
			case arrow.INT32:
				t = parquet.Int32Type
			default:
				t = parquet.FloatType
			}
			fields[FeatureColumn(i)] = parquet.Optional(leaf(parquet.Leaf(t)))
		}
	}
	if d.hasList() {
		fields[ListColumn] = parquet.Optional(parquet.List(parquet.Optional(leaf(parquet.Leaf(parquet.FloatType)))))
	}
	schema := parquet.NewSchema("dataset", fields)
	// Column indexes follow the schema's (name-sorted) leaf order.
	index := map[string]int{}
	var listDef int
	for i, p := range schema.Columns() {
		index[p[0]] = i
		if p[0] == ListColumn {
			lc, _ := schema.Lookup(p...)
			listDef = lc.MaxDefinitionLevel
		}
	}
	codec, err := pgoCodec(d.Codec)
	if err != nil {
		return 0, err
	}
	opts := []parquet.WriterOption{schema, parquet.Compression(codec), parquet.CreatedBy("precog-testgen", "1", "")}
	if d.DataPageV2 {
		opts = append(opts, parquet.DataPageVersion(2))
	}
	pw := parquet.NewWriter(w, opts...)
	var bad int64
	rows := make([]parquet.Row, 0, chunkRows)
	for gStart := int64(0); gStart < n; gStart += d.RowsPerGroup {
		gEnd := min(gStart+d.RowsPerGroup, n)
		for cStart := gStart; cStart < gEnd; cStart += chunkRows {
			cEnd := min(cStart+chunkRows, gEnd)
			rows = rows[:0]
			for k := first + cStart; k < first+cEnd; k++ {
				r := d.Row(k)
				if r.Bad != BadNone {
					bad++
				}
				rows = append(rows, pgoRow(d, r, index, listDef))
			}
			if _, err := pw.WriteRows(rows); err != nil {
				return 0, fmt.Errorf("write rows %d..%d: %w", first+cStart, first+cEnd, err)
			}
		}
		if err := pw.Flush(); err != nil {
			return 0, fmt.Errorf("flush row group at row %d: %w", gStart, err)
		}
	}
	if err := pw.Close(); err != nil {
		return 0, fmt.Errorf("close: %w", err)
	}
	return bad, nil
}

// pgoRow builds one parquet-go row; values must be ordered by column index.
func pgoRow(d Dataset, r Row, index map[string]int, listDef int) parquet.Row {
	row := make(parquet.Row, 0, 1+2*d.Dim)
	var key parquet.Value
	if d.StringKeys {
		key = parquet.ByteArrayValue([]byte(KeyString(r.Key)))
	} else {
		key = parquet.Int64Value(r.Key)
	}
	byCol := make([][]parquet.Value, len(index))
	byCol[index[KeyColumn]] = []parquet.Value{key.Level(0, 0, index[KeyColumn])}
	isNull := func(i int) bool { return r.Bad == BadNull && r.BadColumn == i }
	if d.hasColumns() {
		for i, f := range r.Features {
			c := index[FeatureColumn(i)]
			var v parquet.Value
			switch {
			case isNull(i):
				v = parquet.NullValue().Level(0, 0, c)
			case d.columnKind(i) == arrow.FLOAT64:
				v = parquet.DoubleValue(float64(f)).Level(0, 1, c)
			case d.columnKind(i) == arrow.INT32:
				v = parquet.Int32Value(int32(f)).Level(0, 1, c)
			default:
				v = parquet.FloatValue(f).Level(0, 1, c)
			}
			byCol[c] = []parquet.Value{v}
		}
	}
	if d.hasList() {
		c := index[ListColumn]
		vals := make([]parquet.Value, len(r.Features))
		for i, f := range r.Features {
			rep := 1
			if i == 0 {
				rep = 0
			}
			if isNull(i) {
				vals[i] = parquet.NullValue().Level(rep, listDef-1, c)
			} else {
				vals[i] = parquet.FloatValue(f).Level(rep, listDef, c)
			}
		}
		byCol[c] = vals
	}
	for _, vs := range byCol {
		row = append(row, vs...)
	}
	return row
}

// arrow-go pqarrow writer ----------------------------------------------------

// ArrowSchema is the Arrow schema of d's files (as the arrow writer writes
// them; parquet-go stores the list column as a plain list).
func (d Dataset) ArrowSchema() *arrow.Schema {
	d = d.Defaults()
	var fields []arrow.Field
	if d.StringKeys {
		fields = append(fields, arrow.Field{Name: KeyColumn, Type: arrow.BinaryTypes.String})
	} else {
		fields = append(fields, arrow.Field{Name: KeyColumn, Type: arrow.PrimitiveTypes.Int64})
	}
	if d.hasColumns() {
		for i := 0; i < d.Dim; i++ {
			var t arrow.DataType = arrow.PrimitiveTypes.Float32
			switch d.columnKind(i) {
			case arrow.FLOAT64:
				t = arrow.PrimitiveTypes.Float64
			case arrow.INT32:
				t = arrow.PrimitiveTypes.Int32
			}
			fields = append(fields, arrow.Field{Name: FeatureColumn(i), Type: t, Nullable: true})
		}
	}
	if d.hasList() {
		fields = append(fields, arrow.Field{Name: ListColumn,
			Type: arrow.FixedSizeListOf(int32(d.Dim), arrow.PrimitiveTypes.Float32), Nullable: true})
	}
	return arrow.NewSchema(fields, nil)
}

func writeArrow(w io.Writer, d Dataset, first, n int64) (int64, error) {
	schema := d.ArrowSchema()
	var codec acompress.Compression
	switch d.Codec {
	case CodecNone:
		codec = acompress.Codecs.Uncompressed
	case CodecSnappy:
		codec = acompress.Codecs.Snappy
	case CodecZstd:
		codec = acompress.Codecs.Zstd
	case CodecGzip:
		codec = acompress.Codecs.Gzip
	}
	pageVersion := aparquet.DataPageV1
	if d.DataPageV2 {
		pageVersion = aparquet.DataPageV2
	}
	props := aparquet.NewWriterProperties(
		aparquet.WithCompression(codec),
		aparquet.WithDictionaryDefault(d.Dictionary),
		aparquet.WithDataPageVersion(pageVersion),
		aparquet.WithMaxRowGroupLength(math.MaxInt64),
		aparquet.WithCreatedBy("precog-testgen"),
	)
	// Store the Arrow schema (as pyarrow does) so readers restore FixedSizeList.
	fw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return 0, fmt.Errorf("arrow writer: %w", err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	var bad int64
	for gStart := int64(0); gStart < n; gStart += d.RowsPerGroup {
		gEnd := min(gStart+d.RowsPerGroup, n)
		fw.NewBufferedRowGroup()
		for cStart := gStart; cStart < gEnd; cStart += chunkRows {
			cEnd := min(cStart+chunkRows, gEnd)
			for k := first + cStart; k < first+cEnd; k++ {
				r := d.Row(k)
				if r.Bad != BadNone {
					bad++
				}
				appendArrowRow(b, d, r)
			}
			rec := b.NewRecordBatch()
			err := fw.WriteBuffered(rec)
			rec.Release()
			if err != nil {
				return 0, fmt.Errorf("write rows %d..%d: %w", first+cStart, first+cEnd, err)
			}
		}
	}
	if err := fw.Close(); err != nil {
		return 0, fmt.Errorf("close: %w", err)
	}
	return bad, nil
}

func appendArrowRow(b *array.RecordBuilder, d Dataset, r Row) {
	col := 0
	if d.StringKeys {
		b.Field(col).(*array.StringBuilder).Append(KeyString(r.Key))
	} else {
		b.Field(col).(*array.Int64Builder).Append(r.Key)
	}
	col++
	isNull := func(i int) bool { return r.Bad == BadNull && r.BadColumn == i }
	if d.hasColumns() {
		for i, f := range r.Features {
			fb := b.Field(col)
			col++
			if isNull(i) {
				fb.AppendNull()
				continue
			}
			switch fb := fb.(type) {
			case *array.Float64Builder:
				fb.Append(float64(f))
			case *array.Int32Builder:
				fb.Append(int32(f))
			case *array.Float32Builder:
				fb.Append(f)
			}
		}
	}
	if d.hasList() {
		lb := b.Field(col).(*array.FixedSizeListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Float32Builder)
		for i, f := range r.Features {
			if isNull(i) {
				vb.AppendNull()
			} else {
				vb.Append(f)
			}
		}
	}
}
