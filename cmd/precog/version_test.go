package main

import (
	"strings"
	"testing"
)

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
