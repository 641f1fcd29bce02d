package redis

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/tinylib/msgp/msgp"
)

// A map field (an sklearn classifier's ZipMap output: class label →
// probability) is stored as a JSON object. JSON object keys are strings, so
// integer keys are written as their decimal text: {"0":0.25,"1":0.75}.

// encodableMap accepts maps with string or integer keys and encodable
// values.
func encodableMap(t *arrow.MapType) error {
	switch t.KeyType().ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
	default:
		return fmt.Errorf("map key type %s has no JSON encoding (string or integer keys)", t.KeyType())
	}
	if err := encodable(t.ItemType()); err != nil {
		return fmt.Errorf("map value: %w", err)
	}
	return nil
}

// mapWriter writes one row's map as a JSON object, entries in their stored
// order.
type mapWriter struct {
	a       *array.Map
	keys    valueWriter
	items   valueWriter
	strKeys bool // keys are JSON strings already; else they are quoted
}

func newMapWriter(a *array.Map) (valueWriter, error) {
	keys, err := newValueWriter(a.Keys())
	if err != nil {
		return nil, fmt.Errorf("map key: %w", err)
	}
	items, err := newValueWriter(a.Items())
	if err != nil {
		return nil, fmt.Errorf("map value: %w", err)
	}
	_, str := keys.(stringWriter)
	return mapWriter{a: a, keys: keys, items: items, strKeys: str}, nil
}

func (w mapWriter) appendValue(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	start, end := w.a.ValueOffsets(i)
	dst = append(dst, '{')
	var err error
	for j := int(start); j < int(end); j++ {
		if j > int(start) {
			dst = append(dst, ',')
		}
		if !w.strKeys {
			dst = append(dst, '"')
		}
		if dst, err = w.keys.appendValue(dst, j); err != nil {
			return dst, fmt.Errorf("map key: %w", err)
		}
		if !w.strKeys {
			dst = append(dst, '"')
		}
		dst = append(dst, ':')
		if dst, err = w.items.appendValue(dst, j); err != nil {
			return dst, fmt.Errorf("map value: %w", err)
		}
	}
	return append(dst, '}'), nil
}

func (w mapWriter) appendRange(dst []byte, start, end int) ([]byte, error) {
	return appendRange(w, dst, start, end)
}

// appendMsgpack writes the map as a msgpack map whose keys are strings, as
// in JSON (integer keys as their decimal text), so a record reads the same
// in either encoding.
func (w mapWriter) appendMsgpack(dst []byte, i int) ([]byte, error) {
	if w.a.IsNull(i) {
		return msgp.AppendNil(dst), nil
	}
	start, end := w.a.ValueOffsets(i)
	dst = msgp.AppendMapHeader(dst, uint32(end-start))
	var key []byte
	var err error
	for j := int(start); j < int(end); j++ {
		if sw, ok := w.keys.(stringWriter); ok {
			dst = msgp.AppendString(dst, sw.a.Value(j))
		} else {
			if key, err = w.keys.appendValue(key[:0], j); err != nil {
				return dst, fmt.Errorf("map key: %w", err)
			}
			dst = msgp.AppendStringFromBytes(dst, key)
		}
		if dst, err = w.items.appendMsgpack(dst, j); err != nil {
			return dst, fmt.Errorf("map value: %w", err)
		}
	}
	return dst, nil
}
