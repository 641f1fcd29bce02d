package runview

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestRejectEncoder: each format of precog rejects, with rows and with
// none: text lines under a header (nothing at all for none), CSV under
// its header (the header alone for none, quoting a comma), one JSON array
// ([] for none) that decodes back to the rows.
func TestRejectEncoder(t *testing.T) {
	rows := []jobs.Reject{
		{Shard: 0, Key: "u1", Position: "a.parquet:3", Reason: "feature f2 is NaN"},
		{Shard: 2, Key: "u9", Position: "b.parquet:0", Reason: "null, in f0"},
	}
	cases := []struct {
		format      RejectFormat
		rows, empty string
	}{
		{RejectsText, "KEY\tSHARD\tPOSITION\tREASON\nu1\t0\ta.parquet:3\tfeature f2 is NaN\nu9\t2\tb.parquet:0\tnull, in f0\n", ""},
		{RejectsCSV, "shard,key,position,reason\n0,u1,a.parquet:3,feature f2 is NaN\n2,u9,b.parquet:0,\"null, in f0\"\n", "shard,key,position,reason\n"},
	}
	for _, c := range cases {
		for _, in := range [][]jobs.Reject{rows, nil} {
			var b bytes.Buffer
			e := NewRejectEncoder(&b, c.format)
			for _, r := range in {
				if err := e.Encode(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			want := c.rows
			if in == nil {
				want = c.empty
			}
			if b.String() != want {
				t.Errorf("format %d, %d rows:\n%q\nwant\n%q", c.format, len(in), b.String(), want)
			}
		}
	}
	for _, in := range [][]jobs.Reject{rows, {}} {
		var b bytes.Buffer
		e := NewRejectEncoder(&b, RejectsJSON)
		for _, r := range in {
			if err := e.Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		var got []jobs.Reject
		if err := json.Unmarshal(b.Bytes(), &got); err != nil || len(got) != len(in) || got == nil {
			t.Fatalf("JSON %q: %v, %d rows, want an array of %d", b.String(), err, len(got), len(in))
		}
		for i := range in {
			if got[i] != in[i] {
				t.Errorf("row %d: %+v, want %+v", i, got[i], in[i])
			}
		}
	}
}
