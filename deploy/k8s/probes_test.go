package k8s_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/runner/model"
)

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Each worker Deployment's container, started with its own args against a
// real ledger (--addr moved to a free loopback port), answers its probes'
// paths and /metrics, and on SIGTERM (what a scale-down sends) exits 0
// within the grace period.
func TestWorkerContainersAnswerProbesAndDrain(t *testing.T) {
	bin := precogBin(t)
	pg := testservers.Postgres(t)
	for _, w := range workers(t, render(t, "gpu")) {
		t.Run(w.pool, func(t *testing.T) {
			addr := freeAddr(t)
			args := make([]string, 0, len(w.c.Args))
			for _, a := range w.c.Args {
				if strings.HasPrefix(a, "--addr=") {
					a = "--addr=" + addr
				}
				args = append(args, a)
			}
			args = cpuUnlessCUDA(t, bin, args, pg.DSN)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "PRECOG_DATABASE_URL="+pg.DSN, "PRECOG_STATE_DIR="+t.TempDir())
			var logs strings.Builder
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					<-done
				}
			}()
			probes := []string{w.c.ReadinessProbe.HTTPGet.Path, w.c.LivenessProbe.HTTPGet.Path, "/metrics"}
			for _, path := range probes {
				if code, body := getUntil(t, "http://"+addr+path, 20*time.Second, done); code != http.StatusOK {
					t.Fatalf("GET %s: %d %s\nworker log:\n%s", path, code, body, logs.String())
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			grace := time.Duration(*w.dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("after SIGTERM the worker exited with %v, want 0\n%s", err, logs.String())
				}
			case <-time.After(min(grace, 30*time.Second)):
				t.Fatalf("the worker did not exit within %s of SIGTERM\n%s", min(grace, 30*time.Second), logs.String())
			}
		})
	}
}

// cpuUnlessCUDA returns args as they are when this machine's ONNX Runtime
// has the CUDA execution provider. Without it, it checks that the
// container as written fails at start (exit 2, saying why: what a GPU
// pod started from a CPU-only image does), and returns args with
// --devices=cpu, so that the probes and the drain are still tested.
func cpuUnlessCUDA(t *testing.T, bin string, args []string, dsn string) []string {
	t.Helper()
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--devices=cuda:") })
	if i < 0 || model.CheckDevice(strings.Split(strings.TrimPrefix(args[i], "--devices="), ",")[0]) == nil {
		return args
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PRECOG_DATABASE_URL="+dsn, "PRECOG_STATE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "no CUDA execution provider") {
		t.Fatalf("%v on a CPU-only ONNX Runtime: %v, want exit 2 saying there is no CUDA provider:\n%s", args, err, out)
	}
	t.Logf("CPU-only ONNX Runtime: %s fails at start as it should; probes tested with --devices=cpu", args[i])
	out2 := slices.Clone(args)
	out2[i] = "--devices=cpu"
	return out2
}

// getUntil GETs url until it answers (the server may not listen yet), the
// process exits, or the deadline passes.
func getUntil(t *testing.T, url string, d time.Duration, exited <-chan error) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			return resp.StatusCode, string(body)
		}
		select {
		case err := <-exited:
			t.Fatalf("GET %s: the process exited first: %v", url, err)
		case <-ctx.Done():
			t.Fatalf("GET %s: no answer within %s: %v", url, d, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
