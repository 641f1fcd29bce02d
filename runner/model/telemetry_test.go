package model

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTelemetryOff runs Init in child processes (Init runs once per
// process) whose home and cache directories are empty: with the variable
// unset, ONNX Runtime's telemetry writes nothing there (ORT 1.29 creates
// .cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db otherwise);
// ORT_DISABLE_TELEMETRY=0 set by the user is left as it is.
func TestTelemetryOff(t *testing.T) {
	if os.Getenv("PRECOG_TELEMETRY_CHILD") == "1" {
		err := Init()
		fmt.Printf("INIT: %v %s=%s\n", err, EnvTelemetry, os.Getenv(EnvTelemetry))
		return
	}
	for _, tc := range []struct {
		env, want string
	}{{"", "1"}, {"0", "0"}} {
		home := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestTelemetryOff$", "-test.count=1")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, EnvTelemetry+"=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "PRECOG_TELEMETRY_CHILD=1", "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
		if tc.env != "" {
			cmd.Env = append(cmd.Env, EnvTelemetry+"="+tc.env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var wrote []string
		filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err == nil && p != home {
				wrote = append(wrote, p)
			}
			return nil
		})
		if tc.env == "" && len(wrote) > 0 {
			t.Errorf("with %s unset, ONNX Runtime wrote under the home directory: %v", EnvTelemetry, wrote)
		}
		if want := fmt.Sprintf("INIT: <nil> %s=%s", EnvTelemetry, tc.want); !strings.Contains(string(out), want) {
			t.Errorf("child output\n%s\nwant it to contain %q", out, want)
		}
	}
}
