package run

import (
	"context"
	"os"
	"path/filepath"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
)

// StoredDataDir is the data directory of stored run name's embedded
// backend, when the run is on the embedded backend and that directory is
// on this machine: the one recorded when the run was created, or, for
// runs stored before it was recorded, the one its last adapter was
// written under (<dir>/adapters/<adapter>).
func StoredDataDir(ctx context.Context, store *checkpoint.Store, name string) (string, bool) {
	rec, steps, _, err := store.Curve(ctx, name)
	if err != nil {
		return "", false
	}
	if cfg, err := config.FromJSON(rec.Config); err != nil || !cfg.Embedded() {
		return "", false
	}
	if rec.DataDir != "" {
		if fi, err := os.Stat(rec.DataDir); err == nil && fi.IsDir() {
			return rec.DataDir, true
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		a := steps[i].Adapter
		if a == nil || a.Path == "" {
			continue
		}
		adapters := filepath.Dir(a.Path)
		if filepath.Base(adapters) != "adapters" {
			return "", false
		}
		dir := filepath.Dir(adapters)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", false
		}
		return dir, true
	}
	return "", false
}
