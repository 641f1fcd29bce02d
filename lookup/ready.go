package lookup

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// storeFailure is one failing store in the /readyz answer.
type storeFailure struct {
	Namespace string `json:"namespace"`
	Store     string `json:"store"` // redis, postgres, features
	Target    string `json:"target"`
	Error     string `json:"error"`
	// Misconfigured is set when the store answered and refused (access
	// denied, no such table): it will not heal by itself.
	Misconfigured bool `json:"misconfigured,omitempty"`
}

// readyAnswer is the /readyz body.
type readyAnswer struct {
	Ready    bool              `json:"ready"`
	Checks   map[string]string `json:"checks"`
	Failures []storeFailure    `json:"failures,omitempty"`
}

// handleReady checks every store of every namespace the way a request
// reads it (Postgres: a SELECT of the key column, so a role without SELECT
// fails as it would in a request) and names each failing store with the
// reason. It answers 503 when a namespace has no working store (the
// fallback chain has nothing left to serve from; the live model is no
// substitute, as it answers only keys whose features are at hand) or when
// a store is misconfigured (denied access, missing table: a deploy that
// will not heal by waiting). One store down while another of the same
// namespace answers stays 200: pulling every replica out of the load
// balancer because of a shared Redis would turn a degraded service into an
// outage; the failure is listed all the same.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ans := readyAnswer{Ready: true, Checks: map[string]string{}}
	redisErr := map[*redisConn]error{}
	for _, name := range s.names {
		n := s.ns[name]
		stores, working := 0, 0
		check := func(store, target string, err error) {
			stores++
			ans.Checks[name+"/"+store] = status(err)
			if err == nil {
				working++
				return
			}
			f := storeFailure{Namespace: name, Store: store, Target: target, Error: err.Error(), Misconfigured: misconfigured(err)}
			ans.Failures = append(ans.Failures, f)
			if f.Misconfigured {
				ans.Ready = false
			}
		}
		if n.redis != nil {
			err, seen := redisErr[n.redis.conn]
			if !seen {
				err = s.checkRedis(ctx, n.redis.conn)
				redisErr[n.redis.conn] = err
			}
			if lost := n.redis.lostVersion(); err == nil && lost != "" {
				err = n.redis.errLost(lost)
			}
			check("redis", n.redis.conn.where, err)
		}
		if n.pg != nil {
			check("postgres", n.pg.brk.target, n.pg.check(ctx))
		}
		if stores > 0 && working == 0 {
			ans.Ready = false
		}
		if n.features != nil {
			// Not a store of precomputed answers: listed, never decisive
			// unless misconfigured.
			err := n.features.check(ctx)
			ans.Checks[name+"/features"] = status(err)
			if err != nil {
				f := storeFailure{Namespace: name, Store: "features", Target: n.features.brk.target, Error: err.Error(), Misconfigured: misconfigured(err)}
				ans.Failures = append(ans.Failures, f)
				ans.Ready = ans.Ready && !f.Misconfigured
			}
		}
		if lv := n.live.Load(); lv != nil {
			ans.Checks[name+"/model"] = "ok: " + lv.model.Version()
		}
	}
	code := http.StatusOK
	if !ans.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, ans)
}

// checkRedis pings a Redis server; an open breaker is reported with its
// last error when the ping fails too.
func (s *Server) checkRedis(ctx context.Context, c *redisConn) error {
	err := c.client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	if open := c.brk.allow(); open != nil {
		return open
	}
	return errors.New("redis " + c.where + ": PING: " + c.redact(err.Error()))
}

// misconfigured reports an error that a store answered with and that
// waiting will not fix: access denied (SQLSTATE class 42 and 28 in
// Postgres: no privilege, no such table or column, bad login; NOAUTH,
// WRONGPASS, NOPERM in Redis).
func misconfigured(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "42") || strings.HasPrefix(pgErr.Code, "28")
	}
	msg := err.Error()
	for _, p := range []string{"NOAUTH", "WRONGPASS", "NOPERM"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func status(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}
