package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis prints its own connection-pool complaints ("failed to dial after
// 5 attempts") with the standard logger, one raw line per attempt: with
// Redis down that is dozens of unstructured lines a second, outside slog's
// format, level and destination. Every client built from a Conn routes
// them through slog instead, once per burst of each kind of message.

// Burst limits of go-redis's messages: a kind is logged when it first
// occurs, then again only after it has been quiet for burstQuiet (a new
// burst) or after burstRepeat of continuous repeats, with the count of the
// lines left out in between.
const (
	burstQuiet  = 10 * time.Second
	burstRepeat = time.Minute
)

var (
	loggerOnce sync.Once
	// goLog is the logger installed into go-redis; tests read it.
	goLog = &burstLogger{now: time.Now, log: slog.Default, kinds: map[string]*burst{}}
)

// installLogger makes go-redis log through goLog; it runs once, at the
// first Conn parsed, so both the sink and `precog serve` have it.
func installLogger() {
	loggerOnce.Do(func() { goredis.SetLogger(goLog) })
}

// burstLogger is a go-redis Logging that writes through slog, once per
// burst per message kind (its format string).
type burstLogger struct {
	now   func() time.Time
	log   func() *slog.Logger
	mu    sync.Mutex
	kinds map[string]*burst
}

type burst struct {
	last       time.Time // last occurrence
	logged     time.Time // last line written
	suppressed int       // occurrences left out since logged
}

// Printf implements go-redis's internal Logging.
func (l *burstLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	b := l.kinds[format]
	if b == nil {
		b = &burst{}
		l.kinds[format] = b
	}
	quiet := b.last.IsZero() || now.Sub(b.last) >= burstQuiet
	b.last = now
	if !quiet && now.Sub(b.logged) < burstRepeat {
		b.suppressed++
		l.mu.Unlock()
		return
	}
	left := b.suppressed
	b.logged, b.suppressed = now, 0
	l.mu.Unlock()

	msg := redactKnown(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
	args := []any{"component", "go-redis", "detail", msg}
	if left > 0 {
		args = append(args, "repeats_left_out", left)
	}
	l.log().WarnContext(ctx, "redis client", args...)
}

// known holds every password parsed by ParseConn in this process, so that
// a go-redis message, which knows no Conn, is redacted too.
var known struct {
	sync.Mutex
	secrets []string
}

func rememberSecrets(secrets []string) {
	known.Lock()
	defer known.Unlock()
	for _, s := range secrets {
		found := false
		for _, k := range known.secrets {
			found = found || k == s
		}
		if !found && s != "" {
			known.secrets = append(known.secrets, s)
		}
	}
}

func redactKnown(msg string) string {
	known.Lock()
	defer known.Unlock()
	return redact(msg, known.secrets...)
}
