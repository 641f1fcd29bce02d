package sources

import (
	"encoding/json"
	"testing"
)

// TestDecodePlan: a plan decodes only when it is one JSON object of the
// known fields; unknown fields, trailing data and garbage are errors.
func TestDecodePlan(t *testing.T) {
	type plan struct {
		File string `json:"file"`
		Rows int64  `json:"rows"`
	}
	var p plan
	if err := DecodePlan(json.RawMessage(`{"file":"a.parquet","rows":3}`), &p); err != nil || p != (plan{"a.parquet", 3}) {
		t.Fatalf("DecodePlan = %+v, %v", p, err)
	}
	for _, bad := range []string{`{"file":"a","extra":1}`, `{"file":"a"} {}`, `{"file":`, "\x00", ``, `{"rows":"3"}`} {
		if err := DecodePlan(json.RawMessage(bad), &plan{}); err == nil {
			t.Errorf("DecodePlan(%q) accepted it", bad)
		}
	}
}
