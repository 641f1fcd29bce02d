package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// Decode decodes the prediction's values (one field per model output)
// into v, a pointer to a struct whose json tags name the fields, or a map.
func (p *Prediction) Decode(v any) error {
	b, err := json.Marshal(p.Values)
	if err != nil {
		return fmt.Errorf("precog lookup: key %q: %w", p.Key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("precog lookup: key %q: decode values into %T: %w", p.Key, v, err)
	}
	return nil
}

// Get returns key's prediction with its values decoded into a T (e.g. a
// struct with a field per model output), and the prediction itself for its
// model version, time and source.
func Get[T any](ctx context.Context, c *Client, namespace, key string) (T, *Prediction, error) {
	var v T
	p, err := c.Get(ctx, namespace, key)
	if err != nil {
		return v, nil, err
	}
	if err := p.Decode(&v); err != nil {
		return v, p, err
	}
	return v, p, nil
}

// TypedResult is one key of BatchGetAs: Value holds the decoded values of
// a found key, the zero T otherwise.
type TypedResult[T any] struct {
	Result
	Value T
}

// BatchGetAs is BatchGet with each found key's values decoded into a T.
func BatchGetAs[T any](ctx context.Context, c *Client, namespace string, keys []string) ([]TypedResult[T], error) {
	res, err := c.BatchGet(ctx, namespace, keys)
	if err != nil {
		return nil, err
	}
	out := make([]TypedResult[T], len(res))
	for i := range res {
		out[i].Result = res[i]
		if res[i].Found {
			if err := res[i].Decode(&out[i].Value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
