package inference

import "slices"

// AdapterKeeper decides which per-step adapters a run can unload: it keeps
// the best one and the Keep most recently loaded, so servers hold a bounded
// number of adapters while the run can still serve its best step. It does
// no I/O and is not safe for concurrent use.
type AdapterKeeper struct {
	Keep int

	loaded []string // oldest first
}

// Track records that name was loaded; loading a name again makes it the
// most recent.
func (k *AdapterKeeper) Track(name string) {
	k.loaded = slices.DeleteFunc(k.loaded, func(s string) bool { return s == name })
	k.loaded = append(k.loaded, name)
}

// Untrack records that names were unloaded.
func (k *AdapterKeeper) Untrack(names ...string) {
	k.loaded = slices.DeleteFunc(k.loaded, func(s string) bool { return slices.Contains(names, s) })
}

// Prune returns the adapters to unload, oldest first: every tracked one
// except best and the Keep most recently loaded. It changes nothing; call
// Untrack with the names once they are unloaded.
func (k *AdapterKeeper) Prune(best string) []string {
	recent := max(len(k.loaded)-max(k.Keep, 0), 0)
	var drop []string
	for _, name := range k.loaded[:recent] {
		if name != best {
			drop = append(drop, name)
		}
	}
	return drop
}
