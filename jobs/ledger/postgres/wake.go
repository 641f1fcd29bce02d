package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/precog-ml/precog/jobs/ledger/internal/wake"
)

func newHub(l *Ledger) *wake.Hub {
	var listen func(context.Context)
	if !l.opts.PollOnly {
		listen = l.listen
	}
	return wake.New(func() time.Duration { return l.opts.PollInterval }, listen)
}

// Wake implements ledger.Cluster.
func (l *Ledger) Wake(ctx context.Context, pool string) <-chan struct{} {
	return l.hub.Subscribe(ctx, pool)
}

// listen holds a dedicated LISTEN connection, reconnecting with backoff
// (100ms doubling to 10s); after each (re)connect every subscriber is
// woken, since notices may have been missed meanwhile.
func (l *Ledger) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		l.opts.Logger.Warn("ledger: LISTEN connection lost; reconnecting", "channel", NotifyChannel, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (l *Ledger) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.connCfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	connected()
	l.hub.Signal("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.hub.Signal(n.Payload)
	}
}
