package opsserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServe: /healthz is ok, /readyz says why the process is not ready
// (503) and is ok once it is, /metrics has the Go collector; after stop
// nothing listens.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	stop := serve(context.Background(), ln, Params{Log: slog.New(slog.DiscardHandler), Ready: func(context.Context) error {
		if ready.Load() {
			return nil
		}
		return errors.New("no model loaded")
	}})
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not ready: no model loaded") {
		t.Errorf("/readyz not ready = %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz ready = %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, without go_goroutines", code)
	}
	stop()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still served after stop")
	}
	if _, err := Serve(context.Background(), Params{Addr: "256.0.0.1:1", Log: slog.New(slog.DiscardHandler)}); err == nil {
		t.Error("Serve on a bad address returned no error")
	}
	_, err = Serve(context.Background(), Params{Addr: "256.0.0.1:1", Flag: "--addr", Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.HasPrefix(err.Error(), "--addr: listen tcp") {
		t.Errorf("Serve on a bad address named by --addr = %v, want an error naming the flag", err)
	}
}
