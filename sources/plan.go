package sources

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DecodePlan reads a stored shard plan into v strictly: an unknown field
// or anything after the one JSON value is an error, so a plan this
// version of a source did not write is refused rather than half read.
// Arbitrary bytes give an error, never a panic; each source then checks
// the values it decoded.
func DecodePlan(plan json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(plan))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
