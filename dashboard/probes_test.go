package dashboard

import (
	"testing"

	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestProbes: /healthz and /readyz need no token; /readyz is 503 when the
// ledger cannot be read and 200 when it can (Kubernetes' probes).
func TestProbes(t *testing.T) {
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, Options{Source: Shared{L: l, Name: "test"}})
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body, _ := get(t, ts, p, ""); code != 200 {
			t.Errorf("GET %s = %d %s, want 200", p, code, body)
		}
	}
	l.Close()
	if code, body, _ := get(t, ts, "/readyz", ""); code != 503 {
		t.Errorf("GET /readyz over a closed ledger = %d %s, want 503", code, body)
	}
	if code, _, _ := get(t, ts, "/healthz", ""); code != 200 {
		t.Errorf("GET /healthz over a closed ledger = %d, want 200 (the process is alive)", code)
	}
}
