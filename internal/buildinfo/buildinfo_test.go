package buildinfo

import (
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/precog-ml/precog", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4870060abc"}, {Key: "vcs.time", Value: "2026-11-21T08:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	rt := Runtime{Version: func() (string, error) { return "", errors.New("libonnxruntime.so.1: cannot open shared object file") }, Library: "/opt/ort.so"}
	v := From(bi, rt)
	want := Info{Version: "(devel)", Commit: "4870060abc+dirty", BuildTime: "2026-11-21T08:00:00Z", Go: runtime.Version(),
		ORT: "not loaded: libonnxruntime.so.1: cannot open shared object file", ORTLibrary: "/opt/ort.so"}
	if v != want {
		t.Errorf("From = %+v\nwant %+v", v, want)
	}
	var b strings.Builder
	v.WriteText(&b)
	for _, frag := range []string{"precog (devel)\n", "commit:       4870060abc+dirty", "go:           " + runtime.Version(), "onnx runtime: not loaded: ", "(/opt/ort.so)"} {
		if !strings.Contains(b.String(), frag) {
			t.Errorf("output\n%s\nlacks %q", b.String(), frag)
		}
	}

	// -ldflags -X wins over the build info; no build info at all still works.
	version, commit = "v1.4.0", "deadbeef"
	t.Cleanup(func() { version, commit = "", "" })
	v = From(bi, Runtime{Version: func() (string, error) { return "1.24.3", nil }})
	if v.Version != "v1.4.0" || v.Commit != "deadbeef" || v.ORT != "1.24.3" {
		t.Errorf("with ldflags: %+v", v)
	}
	version, commit = "", ""
	if v = From(nil, Runtime{}); v.Version != "(devel)" || v.Commit != "unknown" || v.ORT != "" {
		t.Errorf("without build info or runtime: %+v", v)
	}
}

// Short is what a worker registers: the version and at most 12 characters
// of the commit, or the version alone when the commit is unknown.
func TestShort(t *testing.T) {
	for _, c := range []struct {
		v    Info
		want string
	}{
		{Info{Version: "v1.4.0", Commit: "4870060abcdef0123456"}, "v1.4.0 (4870060abcde)"},
		{Info{Version: "(devel)", Commit: "abc+dirty"}, "(devel) (abc+dirty)"},
		{Info{Version: "v1.4.0", Commit: "unknown"}, "v1.4.0"},
	} {
		if got := c.v.Short(); got != c.want {
			t.Errorf("%+v.Short() = %q, want %q", c.v, got, c.want)
		}
	}
}
