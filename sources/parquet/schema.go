package parquet

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

func arrowSchema(md *metadata.FileMetaData) (*arrow.Schema, error) {
	sc, err := pqarrow.FromParquet(md.Schema, &pqarrow.ArrowReadProperties{}, md.KeyValueMetadata())
	if err != nil {
		return nil, badColumn(md, err)
	}
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		f.Type = outputType(f.Type)
		fields[i] = f
	}
	return arrow.NewSchema(fields, nil), nil
}

// badColumn names the top-level column whose schema pqarrow cannot
// convert (its errors name none), by converting the columns one at a time.
// It runs only on the error path: the single-column schemas it builds
// re-parent the file schema's nodes.
func badColumn(md *metadata.FileMetaData, err error) error {
	root := md.Schema.Root()
	for i := range root.NumFields() {
		f := root.Field(i)
		g, gerr := schema.NewGroupNode(root.Name(), root.RepetitionType(), schema.FieldList{f}, -1)
		if gerr != nil {
			continue
		}
		if _, ferr := pqarrow.FromParquet(schema.NewSchema(g), &pqarrow.ArrowReadProperties{}, nil); ferr != nil {
			return fmt.Errorf("column %q: %w", f.Name(), err)
		}
	}
	return err
}

// outputType is the Arrow type a column is delivered as: binary columns
// become strings (same memory layout, so the conversion is free), and string
// dictionaries (restored from an Arrow schema stored in the file, e.g. a
// pandas category column) are decoded, so that downstream code sees one key
// type for byte-string keys.
func outputType(t arrow.DataType) arrow.DataType {
	switch t.ID() {
	case arrow.BINARY:
		return arrow.BinaryTypes.String
	case arrow.LARGE_BINARY:
		return arrow.BinaryTypes.LargeString
	case arrow.DICTIONARY:
		switch vt := outputType(t.(*arrow.DictionaryType).ValueType); vt.ID() {
		case arrow.STRING, arrow.LARGE_STRING:
			return vt
		}
	}
	return t
}

// Schema returns the Arrow schema of the first file, after checking that
// every other file has the same columns with the same types (column order
// and nullability may differ). Binary columns are reported as strings, as
// Open delivers them.
func (s *Source) Schema(ctx context.Context) (*arrow.Schema, error) {
	fts, err := s.readFooters(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkCompatible(s.files, fts); err != nil {
		return nil, err
	}
	return fts[0].schema, nil
}

func checkCompatible(files []string, fts []footer) error {
	first := fts[0].schema
	for i := 1; i < len(fts); i++ {
		sc := fts[i].schema
		for _, f := range first.Fields() {
			idx := sc.FieldIndices(f.Name)
			if len(idx) == 0 {
				return fmt.Errorf("parquet source: column %q of %s is missing from %s", f.Name, files[0], files[i])
			}
			g := sc.Field(idx[0])
			if !arrow.TypeEqual(f.Type, g.Type) {
				return fmt.Errorf("parquet source: column %q is %s in %s but %s in %s", f.Name, f.Type, files[0], g.Type, files[i])
			}
		}
		for _, g := range sc.Fields() {
			if !first.HasField(g.Name) {
				return fmt.Errorf("parquet source: column %q of %s is missing from %s", g.Name, files[i], files[0])
			}
		}
	}
	return nil
}
