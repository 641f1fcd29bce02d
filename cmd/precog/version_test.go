package main

import (
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/precog-ml/precog", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4870060abc"}, {Key: "vcs.time", Value: "2026-11-21T08:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	v := buildVersion(bi, func() (string, error) { return "", errors.New("libonnxruntime.so.1: cannot open shared object file") })
	want := versionInfo{Version: "(devel)", Commit: "4870060abc+dirty", BuildTime: "2026-11-21T08:00:00Z", Go: runtime.Version(),
		ORT: "not loaded: libonnxruntime.so.1: cannot open shared object file"}
	if v != want {
		t.Errorf("buildVersion = %+v\nwant %+v", v, want)
	}
	var b strings.Builder
	v.print(&b)
	for _, frag := range []string{"precog (devel)\n", "commit:       4870060abc+dirty", "go:           " + runtime.Version(), "onnx runtime: not loaded: "} {
		if !strings.Contains(b.String(), frag) {
			t.Errorf("output\n%s\nlacks %q", b.String(), frag)
		}
	}

	// -ldflags -X wins over the build info; no build info at all still works.
	version, commit = "v1.4.0", "deadbeef"
	t.Cleanup(func() { version, commit = "", "" })
	v = buildVersion(bi, func() (string, error) { return "1.24.3", nil })
	if v.Version != "v1.4.0" || v.Commit != "deadbeef" || v.ORT != "1.24.3" {
		t.Errorf("with ldflags: %+v", v)
	}
	version, commit = "", ""
	if v = buildVersion(nil, func() (string, error) { return "1.24.3", nil }); v.Version != "(devel)" || v.Commit != "unknown" {
		t.Errorf("without build info: %+v", v)
	}
}

// The real binary: --version and version agree and load the runtime.
func TestVersionCommand(t *testing.T) {
	dir := t.TempDir()
	a, b := precog(t, dir, "--version"), precog(t, dir, "version")
	if a.code != 0 || b.code != 0 || a.stdout != b.stdout {
		t.Fatalf("--version: exit %d %q %s\nversion: exit %d %q %s", a.code, a.stdout, a.stderr, b.code, b.stdout, b.stderr)
	}
	for _, frag := range []string{"precog ", "commit:", "go:           go1.", "onnx runtime: 1."} {
		if !strings.Contains(a.stdout, frag) {
			t.Errorf("--version output\n%s\nlacks %q", a.stdout, frag)
		}
	}
}
