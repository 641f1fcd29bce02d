package redis

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// TestParseConn reads every address form the sink and serve accept, and
// checks that no display form (Where, %v, %+v, %#v, slog) shows the
// password, as written or percent-decoded.
func TestParseConn(t *testing.T) {
	const pw = "pl4nted-S3cret"
	cases := []struct {
		spec  jobs.RedisSinkSpec
		addrs []string
		user  string
		pass  string
		db    int
		tls   bool
		where string
	}{
		{spec: jobs.RedisSinkSpec{Addr: "127.0.0.1:6379"}, addrs: []string{"127.0.0.1:6379"}, where: "127.0.0.1:6379"},
		{spec: jobs.RedisSinkSpec{Addr: "redis://:" + pw + "@127.0.0.1:18380/3"}, addrs: []string{"127.0.0.1:18380"}, pass: pw, db: 3, where: "127.0.0.1:18380/3"},
		{spec: jobs.RedisSinkSpec{Addr: "redis://app:" + pw + "@db.example:6380/0"}, addrs: []string{"db.example:6380"}, user: "app", pass: pw, where: "db.example:6380"},
		{spec: jobs.RedisSinkSpec{Addr: "rediss://:p%40ss%2F" + pw + "@db.example:6380"}, addrs: []string{"db.example:6380"}, pass: "p@ss/" + pw, tls: true, where: "db.example:6380"},
		// Explicit fields win over the URL's.
		{spec: jobs.RedisSinkSpec{Addr: "redis://:url-pw@h:1/2", Password: pw, DB: 5}, addrs: []string{"h:1"}, pass: pw, db: 5, where: "h:1/5"},
		{spec: jobs.RedisSinkSpec{Addrs: []string{"a:1", "b:2"}, Password: pw, TLS: true}, addrs: []string{"a:1", "b:2"}, pass: pw, tls: true, where: "a:1,b:2"},
	}
	for _, c := range cases {
		got, err := ParseConn(c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.spec.Addr, err)
			continue
		}
		if strings.Join(got.Addrs, ",") != strings.Join(c.addrs, ",") || got.Username != c.user || got.Password != c.pass || got.DB != c.db || got.TLS != c.tls {
			t.Errorf("%s: got addrs %v user %q db %d tls %v (password ok %v)", c.spec.Addr, got.Addrs, got.Username, got.DB, got.TLS, got.Password == c.pass)
		}
		if got.Where() != c.where {
			t.Errorf("%s: Where %q, want %q", got.Where(), got.Where(), c.where)
		}
		o := got.Options()
		if o.Password != c.pass || o.DB != c.db || (o.TLSConfig != nil) != c.tls || o.IsClusterMode != (len(c.addrs) > 1) {
			t.Errorf("%s: options do not carry the parsed connection", got.Where())
		}
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "redis", got)
		shown := fmt.Sprintf("%v %+v %#v %s", got, got, got, got) + logged.String() + got.Redact("AUTH "+c.pass+" "+c.spec.Addr)
		for _, secret := range []string{pw, "p%40ss%2F" + pw, "url-pw"} {
			if strings.Contains(shown, secret) {
				t.Errorf("%s: a display form shows the password: %s", got.Where(), shown)
			}
		}
	}
	for _, bad := range []jobs.RedisSinkSpec{
		{Addr: "redis://:" + pw + "@127.0.0.1:notaport/0"},
		{Addr: "redis://:" + pw + "@127.0.0.1:1/notadb"},
		{Addr: "nohostport"},
	} {
		_, err := ParseConn(bad)
		if err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("ParseConn(bad) = %v, want an error without the password", err)
		}
	}
}

// TestGoRedisLogsOncePerBurst feeds the go-redis logger a burst of dial
// failures: one slog line per burst and kind, the password of any parsed
// Conn removed, the left-out count reported with the next line.
func TestGoRedisLogsOncePerBurst(t *testing.T) {
	const pw = "burst-S3cret"
	if _, err := ParseConn(jobs.RedisSinkSpec{Addr: "redis://:" + pw + "@127.0.0.1:1/0"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	l := &burstLogger{now: func() time.Time { return now }, kinds: map[string]*burst{},
		log: func() *slog.Logger { return slog.New(slog.NewTextHandler(&out, nil)) }}
	ctx := context.Background()
	dial := "redis: connection pool: failed to dial after %d attempts: %v"
	for range 50 {
		l.Printf(ctx, dial, 5, fmt.Errorf("dial redis://:%s@127.0.0.1:1: connection refused", pw))
		l.Printf(ctx, "redis: connection pool: failed to get a usable connection after %d attempts", 3)
		now = now.Add(100 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("a 5s burst of 2 kinds wrote %d lines, want 2:\n%s", len(lines), out.String())
	}
	if strings.Contains(out.String(), pw) || !strings.Contains(out.String(), "component=go-redis") || !strings.Contains(lines[0], "failed to dial after 5 attempts") {
		t.Fatalf("lines: %s", out.String())
	}
	// A continuous failure shows up again after burstRepeat, with the count.
	out.Reset()
	for end := now.Add(burstRepeat); now.Before(end); now = now.Add(time.Second) {
		l.Printf(ctx, dial, 5, "connection refused")
	}
	if got := strings.Count(out.String(), "failed to dial"); got != 1 || !strings.Contains(out.String(), "repeats_left_out=") {
		t.Fatalf("a minute of failures wrote %d lines, want 1 with the left-out count:\n%s", got, out.String())
	}
	// After a quiet spell, a new burst is logged at once.
	out.Reset()
	now = now.Add(burstQuiet)
	l.Printf(ctx, dial, 5, "connection refused")
	if strings.Count(out.String(), "failed to dial") != 1 {
		t.Fatalf("a new burst after quiet was not logged: %q", out.String())
	}
}
