package runner

import "time"

// evictLRU trims a worker cache (open runs, loaded models) to max entries:
// it deletes and closes, least recently used first, entries idle says are
// unused; entries in use stay even beyond max.
func evictLRU[E any](entries map[string]E, max int, idle func(E) (since time.Time, unused bool), closeEntry func(E)) {
	for len(entries) > max {
		var (
			oldestKey string
			oldest    E
			oldestAt  time.Time
			found     bool
		)
		for k, e := range entries {
			if at, unused := idle(e); unused && (!found || at.Before(oldestAt)) {
				oldestKey, oldest, oldestAt, found = k, e, at, true
			}
		}
		if !found {
			return
		}
		delete(entries, oldestKey)
		closeEntry(oldest)
	}
}
