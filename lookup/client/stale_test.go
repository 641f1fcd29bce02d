package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup"
	"github.com/precog-ml/precog/lookup/client"
)

// TestStaleness: a record older than the job's max_staleness reads as
// stale through the client: Get from X-Precog-Stale-Age (with its age),
// BatchGet from each result's stale flag and age_seconds; a bad key of the
// batch gets status error while the others are answered.
func TestStaleness(t *testing.T) {
	t.Parallel()
	rd := testservers.Redis(t)
	url, ns, _ := serve(t, rd, func(c *lookup.Config) { c.Specs[0].MaxStaleness = jobs.Duration{Duration: 24 * time.Hour} })
	publish(t, rd, ns, 2) // computed_at 2026-05-01T04:00:00Z
	c := client.New(url, "tok")
	ctx := context.Background()
	var p *client.Prediction
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if p, err = c.Get(ctx, ns, "user-0"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("never published: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	computed := time.Date(2026, 5, 1, 4, 0, 0, 0, time.UTC)
	if !p.Stale || p.StaleAge < 24*time.Hour || p.StaleAge > time.Since(computed)+time.Minute {
		t.Errorf("Get: stale %v, age %s; want stale with its age since %s", p.Stale, p.StaleAge, computed)
	}
	if age := p.Age(time.Now()); age < 24*time.Hour {
		t.Errorf("Prediction.Age = %s, want the time since computed_at", age)
	}
	res, err := c.BatchGet(ctx, ns, []string{"user-1", "", "user-0"})
	if err != nil {
		t.Fatalf("BatchGet with an empty key: %v, want the other keys answered", err)
	}
	for _, i := range []int{0, 2} {
		if r := res[i]; !r.Found || !r.Stale || r.AgeSeconds < (24*time.Hour).Seconds() {
			t.Errorf("BatchGet result %d: %+v, want found, stale, with its age", i, r)
		}
	}
	if r := res[1]; r.Found || r.Status != client.StatusError || r.Error == "" {
		t.Errorf("BatchGet empty key: %+v, want status error with why", r)
	}
}
