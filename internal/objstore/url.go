// Package objstore reads and writes object storage for the spec fields that
// take a path (source.parquet.path, model.path, tokenizer paths,
// sinks.parquet.path): s3://, gs:// and azblob:// URLs, through one library,
// gocloud.dev/blob, which speaks each cloud's own SDK (the AWS SDK v2 for
// S3) and takes credentials from each cloud's standard chain (environment,
// profile, workload identity). Plain paths stay on the local file system and
// are read by the callers with os.
//
// Every call has a timeout and bounded retries: the SDKs retry throttling
// and 5xx answers with jittered backoff up to maxAttempts; ranged reads
// retry a broken body the same way.
package objstore

import (
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/precog-ml/precog/jobs"
)

// Schemes this package opens. One owner: the spec accepts any "scheme://"
// path and this list decides, with an error naming the accepted ones.
var Schemes = []string{"s3", "gs", "azblob"}

// IsURL reports whether p is an object-store URL ("scheme://…") rather
// than a local path (jobs.IsURL, the spec's rule).
func IsURL(p string) bool { return jobs.IsURL(p) }

// Location is a parsed object-store URL: a bucket (a container on Azure)
// and a key or key prefix within it, with the URL's query options.
type Location struct {
	Scheme string
	Bucket string
	// Key is the object key or prefix, without a leading slash; it may hold
	// glob characters.
	Key string
	// Endpoint is an S3-compatible endpoint (the URL's "endpoint" query);
	// empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS itself.
	Endpoint string
	// Region is the URL's "region" query; empty: the SDK's chain.
	Region string
}

// queryKeys are the accepted URL options.
var queryKeys = map[string]bool{"endpoint": true, "region": true}

// Parse splits an object-store URL. Credentials never come from the URL.
func Parse(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("object store URL %q: %w", raw, err)
	}
	known := false
	for _, s := range Schemes {
		known = known || u.Scheme == s
	}
	if !known {
		return Location{}, fmt.Errorf("object store URL %q: scheme %q is not one of %s", raw, u.Scheme, strings.Join(Schemes, ", "))
	}
	if u.User != nil {
		return Location{}, fmt.Errorf("object store URL %q: credentials in a URL are refused; they come from the environment", redact(u))
	}
	if u.Host == "" {
		return Location{}, fmt.Errorf("object store URL %q: no bucket", raw)
	}
	loc := Location{Scheme: u.Scheme, Bucket: u.Host, Key: strings.TrimPrefix(u.Path, "/")}
	q := u.Query()
	var bad []string
	for k := range q {
		if !queryKeys[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return Location{}, fmt.Errorf("object store URL %q: unknown option %s (accepted: endpoint, region)", raw, strings.Join(bad, ", "))
	}
	loc.Endpoint, loc.Region = q.Get("endpoint"), q.Get("region")
	if (loc.Endpoint != "" || loc.Region != "") && loc.Scheme != "s3" {
		return Location{}, fmt.Errorf("object store URL %q: endpoint and region apply to s3:// only", raw)
	}
	return loc, nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// String is the URL of the location, options included.
func (l Location) String() string {
	s := l.Scheme + "://" + l.Bucket + "/" + l.Key
	q := url.Values{}
	if l.Endpoint != "" {
		q.Set("endpoint", l.Endpoint)
	}
	if l.Region != "" {
		q.Set("region", l.Region)
	}
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// ObjectURL is the URL of key in l's bucket, without options: the name
// of one object in plans, errors and logs.
func (l Location) ObjectURL(key string) string {
	return l.Scheme + "://" + l.Bucket + "/" + key
}

// WithKey is l pointing at another key of the same bucket.
func (l Location) WithKey(key string) Location {
	l.Key = key
	return l
}

// Join is l's key joined with elem, slash-separated.
func (l Location) Join(elem ...string) Location {
	l.Key = strings.TrimPrefix(path.Join(append([]string{l.Key}, elem...)...), "/")
	return l
}
