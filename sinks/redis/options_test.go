package redis

import (
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestConfigTakesJobsDefaults: the sink has no defaults of its own; a spec
// built in code is normalized by jobs, as a loaded one is.
func TestConfigTakesJobsDefaults(t *testing.T) {
	c, err := newConfig(jobs.RedisSinkSpec{Addr: "127.0.0.1:1", Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if c.publish != jobs.DefaultRedisPublish || c.encoding != string(jobs.DefaultRedisEncoding) || c.retain != jobs.DefaultRetain ||
		c.batch != jobs.DefaultPipelineBatch || c.depth != jobs.DefaultPipelineDepth || c.timeout != jobs.DefaultRedisTimeout {
		t.Fatalf("config %+v, want jobs' defaults", c)
	}
	if _, err := newConfig(jobs.RedisSinkSpec{Addr: "127.0.0.1:1", Namespace: "ns", Publish: "sometimes"}); err == nil {
		t.Fatal("publish: sometimes accepted")
	}
}
