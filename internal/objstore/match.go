package objstore

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// Match is one object a pattern names.
type Match struct {
	Object
	// Self is set when the pattern named the object itself; otherwise
	// the object lies under Dir, the "directory" (a key prefix ending
	// before a slash; empty for the bucket's root) the pattern named.
	Self bool
	Dir  string
}

// Rel is the object's key relative to Dir (its key when Dir is empty).
func (m Match) Rel() string {
	if m.Self || m.Dir == "" {
		return m.Key
	}
	return strings.TrimPrefix(m.Key, m.Dir+"/")
}

// HasGlob reports whether a key holds glob characters.
func HasGlob(key string) bool { return strings.ContainsAny(key, "*?[") }

// MatchKeys lists the objects that key names the way a file system path
// would: the object itself when it exists, else every object under key
// taken as a directory; for a glob (path.Match syntax, "*" stopping at
// "/", as filepath.Glob), every object the glob matches and every object
// under a "directory" it matches ("data/dt=*" reaches
// data/dt=2026-11-01/part-0.parquet). Results are in key order.
func (b *Bucket) MatchKeys(ctx context.Context, key string) ([]Match, error) {
	if !HasGlob(key) {
		return b.matchPlain(ctx, key)
	}
	if _, err := path.Match(key, ""); err != nil {
		return nil, fmt.Errorf("%s: bad glob pattern: %w", b.loc.ObjectURL(key), err)
	}
	fixed := key[:strings.IndexAny(key, "*?[")]
	if i := strings.LastIndex(fixed, "/"); i >= 0 {
		fixed = fixed[:i+1]
	} else {
		fixed = ""
	}
	var out []Match
	err := b.List(ctx, fixed, func(o Object) error {
		if ok, _ := path.Match(key, o.Key); ok {
			out = append(out, Match{Object: o, Self: true})
			return nil
		}
		// The shortest ancestor "directory" the pattern matches.
		for i := len(fixed); i < len(o.Key); i++ {
			if o.Key[i] != '/' {
				continue
			}
			if ok, _ := path.Match(key, o.Key[:i]); ok {
				out = append(out, Match{Object: o, Dir: o.Key[:i]})
				return nil
			}
		}
		return nil
	})
	return out, err
}

func (b *Bucket) matchPlain(ctx context.Context, key string) ([]Match, error) {
	if key != "" && !strings.HasSuffix(key, "/") {
		a, err := b.Attributes(ctx, key)
		if err == nil {
			return []Match{{Object: Object{Key: key, Size: a.Size, ModTime: a.ModTime}, Self: true}}, nil
		}
		if !NotFound(err) {
			return nil, err
		}
	}
	dir := strings.TrimSuffix(key, "/")
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	var out []Match
	err := b.List(ctx, prefix, func(o Object) error {
		out = append(out, Match{Object: o, Dir: dir})
		return nil
	})
	return out, err
}
