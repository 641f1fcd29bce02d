package k8s_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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
			// The pod mounts nothing at PRECOG_STATE_DIR (its root is read-only).
			cmd.Env = append(os.Environ(), "PRECOG_DATABASE_URL="+pg.DSN, "PRECOG_STATE_DIR="+readOnlyDir(t))
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

// readOnlyDir is an empty directory no one may write to: a pod's state
// directory on its read-only root filesystem.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	return dir
}

// The dashboard Deployment's container, started with its own args against
// a real ledger (--addr on a free port, --jobs on the rendered ConfigMap's
// files) and the token of precog-api-tokens, answers its probes, serves the
// jobs page to that token only, and exits 0 on SIGTERM within the grace
// period; without a token it refuses to start.
func TestDashboardContainerAnswersProbes(t *testing.T) {
	bin := precogBin(t)
	pg := testservers.Postgres(t)
	objs := render(t, "cpu")
	jobsDir := t.TempDir()
	for _, cm := range ofKind[corev1.ConfigMap](objs) {
		if strings.HasPrefix(cm.Name, "precog-jobs") {
			for f, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(jobsDir, f), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var dep *appsv1.Deployment
	for _, d := range ofKind[appsv1.Deployment](objs) {
		if d.Spec.Template.Labels["app.kubernetes.io/component"] == "dashboard" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no dashboard Deployment rendered")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	addr := freeAddr(t)
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=" + addr
		case strings.HasPrefix(a, "--jobs="):
			a = "--jobs=" + jobsDir
		}
		args = append(args, a)
	}
	env := append(os.Environ(), "PRECOG_DATABASE_URL="+pg.DSN, "PRECOG_STATE_DIR="+readOnlyDir(t))

	noTok := exec.Command(bin, args...)
	noTok.Env = append(env, "PRECOG_API_TOKENS=")
	if out, err := noTok.CombinedOutput(); err == nil || !strings.Contains(string(out), "no tokens") {
		t.Fatalf("the dashboard without a token: %v, want a refusal to start:\n%s", err, out)
	}

	const tok = "k8s-test-token"
	cmd := exec.Command(bin, args...)
	cmd.Env = append(env, "PRECOG_API_TOKENS="+tok)
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
	for _, path := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path} {
		if code, body := getUntil(t, "http://"+addr+path, 20*time.Second, done); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s\nlog:\n%s", path, code, body, logs.String())
		}
	}
	for token, want := range map[string]int{tok: http.StatusOK, "wrong": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /api/runs with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM the dashboard exited with %v, want 0\n%s", err, logs.String())
		}
	case <-time.After(grace):
		t.Fatalf("the dashboard did not exit within %s of SIGTERM\n%s", grace, logs.String())
	}
}
