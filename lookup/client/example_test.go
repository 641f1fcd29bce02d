package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup"
	"github.com/precog-ml/precog/lookup/client"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// startServer runs a lookup API in-process over a real redis-server holding
// one published record, as a batch job would have left it.
func startServer() (url string, stop func()) {
	addr, err := testservers.StartRedis()
	if err != nil {
		log.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	rdb.Set(ctx, "recs:run-1:user-42", `{"items":[7,3,9],"model_version":"a1b2c3","computed_at":"2026-05-01T04:00:00Z"}`, 0)
	rdb.Set(ctx, "recs:current", "run-1", 0)

	spec := &jobs.Spec{
		Name:    "user-recs",
		Source:  jobs.SourceSpec{Key: "user_id"},
		Sinks:   jobs.SinksSpec{Redis: &jobs.RedisSinkSpec{Addr: addr, Namespace: "recs"}},
		Serving: jobs.ServingSpec{Live: new(bool)}, // no model in this example
	}
	srv, err := lookup.New(lookup.Config{
		Specs:  []*jobs.Spec{spec},
		Tokens: []string{"example-token"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	return hs.URL, func() { hs.Close(); srv.Close() }
}

func Example() {
	url, stop := startServer()
	defer stop()

	// Retries of shed (429) and unavailable (503) answers are opt-in;
	// batchGets above the server's limit are split and sent in parallel.
	c := client.New(url, "example-token",
		client.WithRetry(client.RetryPolicy{Attempts: 3}),
		client.WithMaxBatchKeys(1000), client.WithParallelism(4))
	ctx := context.Background()

	p, err := c.Get(ctx, "recs", "user-42")
	if err != nil {
		log.Fatal(err)
	}
	var items []int64
	if err := p.Value("items", &items); err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Key, items, p.ModelVersion, p.Source)

	// Values decode into a type of the caller's.
	type Recs struct {
		Items []int64 `json:"items"`
	}
	recs, _, err := client.Get[Recs](ctx, c, "recs", "user-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(recs.Items)

	_, err = c.Get(ctx, "recs", "user-0")
	fmt.Println(errors.Is(err, client.ErrNotFound))

	res, err := client.BatchGetAs[Recs](ctx, c, "recs", []string{"user-42", "user-0"})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println(r.Key, r.Found, r.Status, r.Value.Items)
	}

	_, err = client.New(url, "wrong").Get(ctx, "recs", "user-42")
	var apiErr *client.Error
	fmt.Println(errors.As(err, &apiErr), apiErr.Status)
	// Output:
	// user-42 [7 3 9] a1b2c3 redis
	// [7 3 9]
	// true
	// user-42 true found [7 3 9]
	// user-0 false miss []
	// true 401
}
