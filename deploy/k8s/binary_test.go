package k8s_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// precogBin builds cmd/precog once per test binary.
func precogBin(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "precog-k8s-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "precog")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/precog")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/precog: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// flagLine matches a flag in cobra's help: "  -n, --limit int   …" or
// "      --log-json   …" (a bool: no type).
var flagLine = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([a-zA-Z]+))?\s{2,}`)

// schedulerFlags are the flags of `precog scheduler` as its issue defines
// them, used only while the binary has no such command yet.
var schedulerFlags = map[string]string{"jobs": "string", "db": "string", "addr": "string"}

var (
	helpMu    sync.Mutex
	helpCache = map[string]map[string]string{}
)

// subcommandFlags returns the flags (name → type, "" for a bool) that
// `precog <sub> --help` lists, global flags included.
func subcommandFlags(t testing.TB, sub string) map[string]string {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helpCache[sub]; ok {
		return f
	}
	bin := precogBin(t)
	out, err := exec.Command(bin, sub, "--help").CombinedOutput()
	flags := map[string]string{}
	if err != nil || !strings.Contains(string(out), "precog "+sub) {
		// cobra answers an unknown command's --help with the root's help.
		if sub != "scheduler" {
			t.Fatalf("precog %s --help: not a precog command (%v):\n%s", sub, err, out)
		}
		t.Logf("precog has no scheduler command yet: checking its args against the flags its issue defines %v", schedulerFlags)
		root, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("precog --help: %v\n%s", err, root)
		}
		out = root
		for k, v := range schedulerFlags {
			flags[k] = v
		}
	}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = m[2]
	}
	if len(flags) < 3 {
		t.Fatalf("precog %s --help lists %d flags; the help format changed?\n%s", sub, len(flags), out)
	}
	helpCache[sub] = flags
	return flags
}

// parseArgs splits a container's args into the subcommand and its flags
// (name → value; "true" for a bool), refusing any flag the subcommand does
// not have, a missing value, and positional arguments.
func parseArgs(t testing.TB, where string, args []string) (string, map[string]string) {
	t.Helper()
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		t.Fatalf("%s: args %q do not start with a precog subcommand", where, args)
	}
	sub := args[0]
	known := subcommandFlags(t, sub)
	got := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Errorf("%s: argument %q is not a --flag", where, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		typ, ok := known[name]
		if !ok {
			t.Errorf("%s: precog %s has no flag --%s", where, sub, name)
			continue
		}
		switch {
		case hasVal:
		case typ == "":
			val = "true"
		case i+1 < len(args):
			i++
			val = args[i]
		default:
			t.Errorf("%s: --%s needs a value", where, name)
		}
		got[name] = val
	}
	return sub, got
}

// The parser must refuse a flag the binary does not have.
func TestParseArgsRefusesUnknownFlag(t *testing.T) {
	ft := &fakeT{TB: t}
	parseArgs(ft, "probe", []string{"worker", "--pool=gpu", "--gpus=2"})
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "no flag --gpus") {
		t.Fatalf("errors %q, want one naming --gpus", ft.errs)
	}
}

// fakeT records Errorf calls instead of failing the test.
type fakeT struct {
	testing.TB
	errs []string
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
