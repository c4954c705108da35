package refmodel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LoadStored serves every adapter found under the data directory's
// adapters/ (the ones earlier jobs wrote, e.g. a finished run's) under the
// name it was written as, so that `grpo eval --base-url` can call a run's
// step adapters after the run ended. Names already served are left as
// they are. It returns the names it loaded, sorted; an adapter directory
// that cannot be read is an error naming it.
func (b *Backend) LoadStored() ([]string, error) {
	root := filepath.Join(b.opts.DataDir, "adapters")
	var loaded []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == root {
			return fs.SkipAll
		}
		if err != nil {
			return err
		}
		if !d.IsDir() || path == root {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir // a save in progress, or an old copy being removed
		}
		if _, err := os.Stat(filepath.Join(path, ConfigFile)); err != nil {
			return nil // a directory level of a name with slashes
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		a, err := LoadAdapter(path)
		if err != nil {
			return err
		}
		pol, err := b.models.w0.Policy(a)
		if err != nil {
			return fmt.Errorf("adapter %s: %w (start the server with the base it was trained on: --base-coordination %v)", name, err, a.BaseCoordination)
		}
		b.models.mu.Lock()
		if _, ok := b.models.byName[name]; !ok && name != BaseModelName {
			b.models.byName[name] = &servedModel{name: name, path: path, created: time.Now().Unix(), policy: pol}
			loaded = append(loaded, name)
		}
		b.models.mu.Unlock()
		return fs.SkipDir
	})
	if err != nil {
		return loaded, fmt.Errorf("load stored adapters from %s: %w", root, err)
	}
	return loaded, nil
}
