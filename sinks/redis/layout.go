package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/precog-ml/precog/jobs"
)

// Layout is the one source of truth for where the Redis sink and its
// readers (the lookup API) find things in a namespace. Every key the sink
// writes or a reader reads is named by a method here.
//
//	{ns}:current              published version (atomic mode)
//	{ns}:versions             sorted set of retained published versions
//	{ns}:gc                   set of versions whose keys are being deleted
//	{ns}:meta                 hash: version, published_at, mode, encoding (of version)
//	{ns}:lock                 writer lock: holder JSON and token
//	{ns}:published            pub/sub channel announcing a new current version
//	{ns}:{version}:{key}      a record (atomic); {ns}:{key} with in_place
//	{ns}:shards:{version}     hash: one commit marker per shard (field = index),
//	                          "format" and "encoding" (json | msgpack) of the version
//	{ns}:keys:{version}       every record key the version's writers sent
//	{ns}:live:{version}:{key} the lookup API's cache of live inferences
//
// With atomic publish the second part of a record key is always a run
// version, and the words above are reserved (ValidVersion rejects them), so
// no record key equals a bookkeeping key. With in_place the record keys are
// {ns}:{key} and an entity key such as "meta" or "shards:v1" collides.
type Layout struct {
	// Namespace is the first part of every key.
	Namespace string
	// InPlace selects publish: in_place (records at {ns}:{key}).
	InPlace bool
}

// reservedVersions are the second key parts the layout uses itself.
var reservedVersions = []string{"current", "versions", "gc", "meta", "lock", "published", "shards", "keys", "live"}

// Current holds the published version.
func (l Layout) Current() string { return l.Namespace + ":current" }

// Versions is the sorted set of retained published versions (score =
// publish time in ms).
func (l Layout) Versions() string { return l.Namespace + ":versions" }

// GC is the set of expired versions whose keys are being deleted.
func (l Layout) GC() string { return l.Namespace + ":gc" }

// Meta is the informational hash of the last publish.
func (l Layout) Meta() string { return l.Namespace + ":meta" }

// Lock is the writer lock of the namespace.
func (l Layout) Lock() string { return l.Namespace + ":lock" }

// Channel is the pub/sub channel on which a new current version is
// announced (the message is the version).
func (l Layout) Channel() string { return l.Namespace + ":published" }

// RecordPrefix is what precedes the entity key in every record key of a
// version: "{ns}:{version}:" (atomic) or "{ns}:" (in_place).
func (l Layout) RecordPrefix(version string) string {
	if l.InPlace || version == "" {
		return l.Namespace + ":"
	}
	return l.Namespace + ":" + version + ":"
}

// Record is the key of one record of version.
func (l Layout) Record(version, key string) string { return l.RecordPrefix(version) + key }

// Shards is the hash of a version's shard commit markers: field
// strconv.Itoa(index) holds the marker JSON (see Marker).
func (l Layout) Shards(version string) string { return l.Namespace + ":shards:" + version }

// EncodingField is the field of Shards(version) that records the version's
// record encoding (EncodingJSON or EncodingMsgpack; absent: json, written
// by a precog without encodings), and of Meta() the encoding of the version
// published or rolled back to last. The hash lives and dies with the
// version's records, so a rollback finds the encoding of the version it
// switches to. Readers need not consult it: records are self-describing
// (see IsMsgpackRecord); it is there for tools and operators.
const EncodingField = "encoding"

// ShardField is the field of shard index in Shards(version).
func ShardField(index int) string { return strconv.Itoa(index) }

// Keys is the version's key record: the entity keys of every pipeline its
// writers sent, each as a uvarint length and the key's bytes, appended in
// the same pipeline as the records so that deleting a version never needs
// to scan the keyspace.
func (l Layout) Keys(version string) string { return l.Namespace + ":keys:" + version }

// Live is the lookup API's cache key of a live inference for version
// ("" when none is published: stored under "-").
func (l Layout) Live(version, key string) string {
	if version == "" {
		version = "-"
	}
	return l.Namespace + ":live:" + version + ":" + key
}

// Marker is what a committed shard leaves in Shards(version): what Stage
// verifies before the version may be published.
type Marker struct {
	// Rows is the number of records the committed attempt wrote.
	Rows int64 `json:"rows"`
	// Nodes is the state of every master when the attempt started: a
	// restart (new run_id) or evictions since then may have lost its keys.
	Nodes []NodeState `json:"nodes"`
}

// NodeState is one Redis server's identity and eviction counter.
type NodeState struct {
	Addr    string `json:"addr"`
	RunID   string `json:"run_id"`
	Evicted int64  `json:"evicted"`
}

// CurrentKey holds the published version of namespace.
func CurrentKey(namespace string) string { return Layout{Namespace: namespace}.Current() }

// VersionsKey is the sorted set of retained published versions.
func VersionsKey(namespace string) string { return Layout{Namespace: namespace}.Versions() }

// Channel is the pub/sub channel on which Publish and Rollback announce the
// new current version (the message is the version).
func Channel(namespace string) string { return Layout{Namespace: namespace}.Channel() }

// RecordKey is where a record lives: {ns}:{version}:{key} for atomic
// publish, {ns}:{key} for in_place (version "").
func RecordKey(namespace, version, key string) string {
	return Layout{Namespace: namespace}.Record(version, key)
}

func gcKey(ns string) string   { return Layout{Namespace: ns}.GC() }
func metaKey(ns string) string { return Layout{Namespace: ns}.Meta() }

// ValidNamespace rejects names that would make keys ambiguous or SCAN
// patterns unsafe: empty, whitespace, control characters, ':' (the key
// separator), glob metacharacters, or hash-tag braces.
func ValidNamespace(ns string) error {
	if ns == "" {
		return errors.New("required")
	}
	if len(ns) > 128 {
		return fmt.Errorf("%q longer than 128 bytes", ns)
	}
	for _, r := range ns {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(":*?[]\\{}", r) {
			return fmt.Errorf("%q: character %q not allowed (no whitespace, ':', glob characters or braces)", ns, r)
		}
	}
	return nil
}

// ValidVersion applies jobs.Version's rules to a run version, which
// becomes the middle part of every record key, and rejects the reserved
// words of the layout.
func ValidVersion(v string) error {
	if err := jobs.Version(v).Validate(); err != nil {
		return err
	}
	for _, r := range reservedVersions {
		if v == r {
			return fmt.Errorf("run version %q is reserved", v)
		}
	}
	return nil
}
