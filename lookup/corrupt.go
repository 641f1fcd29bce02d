package lookup

import (
	"fmt"
	"log/slog"

	sinkredis "github.com/precog-ml/precog/sinks/redis"
)

// sourceCorrupt counts, in precog_lookup_keys_total, the keys whose stored
// record was corrupt; the answer to such a key is its error.
const sourceCorrupt = "corrupt"

// errCorrupt is the error of one key whose stored record cannot be read
// (not a JSON object, a msgpack record that does not decode, a Postgres
// value with no JSON form). It is not a miss: the store holds something
// for the key, so answering 404 would hide the damage and let a client
// cache an absence. GET answers it 500; batchGet gives the key status
// "error" and answers the others.
type errCorrupt struct {
	ns, key, store string
	cause          error
}

func (e *errCorrupt) Error() string {
	return fmt.Sprintf("namespace %s, key %q: the record stored in %s is corrupt (%v); rewrite it by publishing the job again",
		e.ns, e.key, e.store, e.cause)
}

func (e *errCorrupt) Unwrap() error { return e.cause }

// corrupt records a corrupt stored record of key (metric and log) and
// returns the key's answer.
func (s *Server) corrupt(n *namespace, key, store string, cause error) answer {
	s.metrics.corrupt.WithLabelValues(n.name, store).Inc()
	err := &errCorrupt{ns: n.name, key: key, store: store, cause: cause}
	s.cfg.Logger.LogAttrs(s.ctx, slog.LevelError, "corrupt stored record",
		slog.String("namespace", n.name), slog.String("key", key), slog.String("store", store), slog.String("err", cause.Error()))
	return answer{source: sourceCorrupt, bad: err}
}

// recordFault says why rec, which failed isRecord, is not a record.
func recordFault(rec []byte) error {
	if sinkredis.IsMsgpackRecord(rec) {
		if _, err := sinkredis.AppendRecordJSON(nil, rec); err != nil {
			return err
		}
	}
	const show = 32
	if len(rec) > show {
		return fmt.Errorf("not a JSON object: %q… (%d bytes)", rec[:show], len(rec))
	}
	return fmt.Errorf("not a JSON object: %q", rec)
}
