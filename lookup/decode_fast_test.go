package lookup

import (
	"reflect"
	"testing"
)

// TestFastPredictPaths pins which bodies the one-pass decoder takes and
// what it reads; everything it declines goes to the general decoder.
func TestFastPredictPaths(t *testing.T) {
	for _, c := range []struct {
		body string
		want map[string][]float64 // nil: declined
	}{
		{`{"key":"u1","inputs":{"features":[1,2.5,-3e2]}}`, map[string][]float64{"features": {1, 2.5, -300}}},
		{" {\n\"inputs\" : { \"a\":[ ] , \"b\" :[0.125 ,-0] } ,\t\"key\":\"é\" } ", map[string][]float64{"a": {}, "b": {0.125, 0}}},
		{`{"key":"u1","inputs":{}}`, map[string][]float64{}},
		{`{"key":"u1"}`, nil},                                     // no inputs: fine for the fast path, but Inputs is nil
		{`{"key":7,"inputs":{"x":[1]}}`, nil},                     // integer key
		{`{"key":"u\u0031","inputs":{"x":[1]}}`, nil},             // escape
		{`{"key":"u1","inputs":{"x":[1],"x":[2]}}`, nil},          // duplicate input
		{`{"key":"u1","key":"u2","inputs":{"x":[1]}}`, nil},       // duplicate field
		{`{"key":"u1","columns":{"c":1}}`, nil},                   // another field
		{`{"key":"u1","inputs":{"x":[1e400]}}`, nil},              // out of range
		{`{"key":"u1","inputs":{"x":[01]}}`, nil},                 // not a JSON number
		{`{"key":"u1","inputs":{"x":[1.]}}`, nil},                 // not a JSON number
		{`{"key":"u1","inputs":{"x":[0x10]}}`, nil},               // not a JSON number
		{`{"key":"u1","inputs":{"x":[1,]}}`, nil},                 // trailing comma
		{`{"key":"u1","inputs":{"x":[1]}} {}`, nil},               // trailing data
		{`{"key":"u1","inputs":{"x":[1]}`, nil},                   // truncated
		{"{\"key\":\"u\xff\",\"inputs\":{\"x\":[1]}}", nil},       // invalid UTF-8
		{"{\"key\":\"u\x01\",\"inputs\":{\"x\":[1]}}", nil},       // control character
		{`{"key":"u1","inputs":{"x":[1],"y":"nope"}}`, nil},       // not an array
		{`{"key":"u1","inputs":{"x":[[1]]}}`, nil},                // nested
		{`{"key":"u1","inputs":{"x":[true]}}`, nil},               // not a number
		{`{"key":"u1","inputs":{"x":[1]},"text":{"t":"a"}}`, nil}, // text
	} {
		req, ok := fastPredict([]byte(c.body))
		if c.want == nil {
			if ok && req.Inputs != nil {
				t.Errorf("%s: taken, want declined", c.body)
			}
			continue
		}
		if !ok || !reflect.DeepEqual(req.Inputs, c.want) {
			t.Errorf("%s: %v (taken %v), want %v", c.body, req.Inputs, ok, c.want)
		}
	}
}

// FuzzFastPredictMatchesGeneral: decodePredict, which tries the one-pass
// decoder first, answers every body exactly as the general decoder alone
// does: the same request, or the same error.
func FuzzFastPredictMatchesGeneral(f *testing.F) {
	for _, s := range []string{`{"key":"a","inputs":{"x":[1,2]}}`, ` { "inputs" : { "x" : [ 1.5e3 , -0 ] , "y" : [ ] } , "key" : "é" } `,
		`{"key":"a","inputs":{}}`, `{"key":"a","inputs":{"x":[1],"x":[2]}}`, `{"key":"a","inputs":{"x":[1e400]}}`, `{"key":"a"}`,
		`{"key":"","inputs":{"x":[1]}}`, `{"key":"longer-than-8","inputs":{"x":[1]}}`} {
		f.Add([]byte(s))
	}
	lim := keyLimits{maxKeyLen: 8, maxKeys: 4}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodePredict(b, lim)
		want, wantErr := decodePredictGeneral(b, lim)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%q: error %v, general path %v", b, err, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v, general path %+v", b, got, want)
		}
	})
}

// TestDecodeErrorsDeterministic: a body with several faults gets the same
// message every time (the general decoder reads members from maps).
func TestDecodeErrorsDeterministic(t *testing.T) {
	lim := keyLimits{maxKeyLen: 64, maxKeys: 4}
	for _, body := range []string{`{"key":"a","zz":1,"aa":2,"mm":3}`, `{"key":"a","inputs":{"z":"bad","a":"bad","m":[true]}}`,
		`{"key":"a","columns":{"z":[1,"x"],"b":"bad","c":{}}}`} {
		_, first := decodePredict([]byte(body), lim)
		if first == nil {
			t.Fatalf("%s: accepted", body)
		}
		for range 50 {
			if _, err := decodePredict([]byte(body), lim); err == nil || err.Error() != first.Error() {
				t.Fatalf("%s: %v, then %v", body, first, err)
			}
		}
	}
}

// BenchmarkDecodePredict decodes a 16-feature :predict body with the
// one-pass decoder (what decodePredict runs) and with the general one.
func BenchmarkDecodePredict(b *testing.B) {
	body := []byte(`{"key":"user-123456","inputs":{"features":[0.49671414,-0.1382643,0.64768857,1.5230298,-0.23415338,-0.23413695,1.5792128,0.7674347,-0.46947438,0.54256004,-0.46341768,-0.46572974,0.24196227,-1.9132802,-1.7249179,-0.5622875]}}`)
	lim := keyLimits{maxKeyLen: 256, maxKeys: 1000}
	for _, c := range []struct {
		name   string
		decode func([]byte, keyLimits) (predictRequest, error)
	}{{"decodePredict", decodePredict}, {"general", decodePredictGeneral}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(body, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
