package promote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/internal/fsutil"
)

// ManifestFile is the manifest Export writes beside the adapter files.
const ManifestFile = "grpo-checkpoint.json"

// ManifestFormat names the manifest's layout; it changes when a field
// changes meaning.
const ManifestFormat = "grpo-checkpoint/1"

// Manifest is grpo-checkpoint.json: where an exported adapter comes from
// and how well it did. Its JSON field names are a public interface.
type Manifest struct {
	Format     string `json:"format"`
	Run        string `json:"run"`
	Step       int    `json:"step"`
	SelectedBy string `json:"selected_by"` // best | last | base | step
	// Metric and Value score the exported step as `grpo best --json`
	// does: for a step picked as best, Value is the selection's value
	// (EMA-smoothed when the run smooths); for another step it is the raw
	// validation metric, and null when the step was not evaluated.
	Metric checkpoint.Metric `json:"metric"`
	Value  *float64          `json:"value"`
	// Selection is the run's choice under its own policy (`grpo best
	// --json` without the run name), null while it has none.
	Selection  *checkpoint.Selection  `json:"selection"`
	Validation *checkpoint.Evaluation `json:"validation"` // the step's validation, null when not evaluated
	// Test is the step's measurement on the run's test split, null when
	// it was not measured (`grpo eval --db DB --run RUN --step N` does).
	Test *checkpoint.TestEvaluation `json:"test"`
	// BaseModel is the model the adapter was trained on (trainer.base_model);
	// ServedModel the name the inference servers served it under.
	BaseModel   string          `json:"base_model"`
	ServedModel string          `json:"served_model"`
	LoRA        config.LoRA     `json:"lora"`
	Adapter     *AdapterFiles   `json:"adapter"` // null for the base model: nothing is copied
	Config      json.RawMessage `json:"config"`  // the run's resolved config
	Exported    time.Time       `json:"exported"`
}

// AdapterFiles describe the copied adapter.
type AdapterFiles struct {
	Name   string `json:"name"`   // the name it was served under during the run
	Source string `json:"source"` // the directory it was copied from
	// SHA256 is the content hash of the adapter files: the SHA-256 of the
	// listing that `sha256sum` prints for them, one line
	// "<hex sha256>  <path>\n" per file, paths relative to the directory
	// with / separators, sorted bytewise, the manifest excluded. In the
	// export directory:
	//   find . -type f ! -name grpo-checkpoint.json | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum
	SHA256 string     `json:"sha256"`
	Files  []FileHash `json:"files"`
}

// FileHash is one adapter file.
type FileHash struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ErrNotEmpty is returned by Export when the directory holds files and
// replacing them was not asked for.
var ErrNotEmpty = errors.New("directory is not empty")

// NewManifest describes cp; Adapter is filled by Export as it copies.
func NewManifest(cp Checkpoint) Manifest {
	m := Manifest{
		Format: ManifestFormat, Run: cp.Run.Name, Step: cp.Step.Step, SelectedBy: cp.SelectedBy,
		Metric: cp.Run.Metric, Selection: cp.Selection, Validation: cp.Validation, Test: cp.Test,
		BaseModel: cp.Config.Trainer.BaseModel, ServedModel: cp.Config.Inference.Model,
		LoRA: cp.Config.Trainer.LoRA, Config: cp.Run.Config,
	}
	if m.Metric == "" {
		m.Metric = checkpoint.MetricNames[0]
	}
	switch {
	case cp.Selection != nil && cp.Selection.Step == cp.Step.Step && cp.Selection.Scored:
		v := cp.Selection.Value
		m.Value = &v
	case cp.Validation != nil:
		v := m.Metric.Of(*cp.Validation)
		m.Value = &v
	}
	return m
}

// Export writes cp's adapter files and its manifest into dir, atomically:
// everything goes to a temporary directory beside dir, each file synced,
// which is then renamed to dir, so dir is never half-written. A dir that
// exists and is not empty is refused with ErrNotEmpty unless force, which
// replaces it. For the base model (no adapter) only the manifest is
// written, with "adapter": null. Cancelling ctx stops the copy: the
// temporary directory is removed and dir left as it was.
func Export(ctx context.Context, cp Checkpoint, dir string, force bool, now time.Time) (Manifest, error) {
	m := NewManifest(cp)
	m.Exported = now.UTC()
	dst, err := filepath.Abs(dir)
	if err != nil {
		return m, fmt.Errorf("export to %s: %w", dir, err)
	}
	// at is where the rename lands: dst through the links of its parent
	// (a link dst itself is replaced, not followed).
	at := filepath.Join(realPath(filepath.Dir(dst)), filepath.Base(dst))
	if cp.Store != "" {
		if within(realPath(cp.Store), at) {
			return m, fmt.Errorf("export to %s: it holds the store %s the checkpoint is read from, which an export would replace; choose another directory", dir, cp.Store)
		}
	}
	if err := spareRun(cp, dir, at); err != nil {
		return m, err
	}
	if err := checkTarget(dst, force); err != nil {
		return m, err
	}
	var src string
	if a := cp.Adapter(); a != nil {
		if src, err = filepath.Abs(a.Path); err != nil {
			return m, fmt.Errorf("adapter of step %d: %w", cp.Step.Step, err)
		}
		if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
			return m, fmt.Errorf("adapter %s of step %d: directory %s is not on this machine (with a remote trainer, export on the trainer's host or copy the directory from it)", a.Name, cp.Step.Step, a.Path)
		}
		if real := realPath(src); within(at, real) || within(real, at) {
			return m, fmt.Errorf("export to %s: overlaps the adapter directory %s; choose another directory", dir, src)
		}
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return m, fmt.Errorf("export to %s: %w", dir, err)
	}
	tmp, err := mkdirTemp(parent, ".grpo-export-"+filepath.Base(dst)+"-")
	if err != nil {
		return m, fmt.Errorf("export to %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	if src != "" {
		files, err := copyTree(ctx, src, tmp)
		if ctx.Err() != nil {
			return m, interrupted(ctx, dir)
		}
		if err != nil {
			return m, fmt.Errorf("copy adapter %s: %w", src, err)
		}
		m.Adapter = &AdapterFiles{Name: cp.Adapter().Name, Source: src, SHA256: TreeHash(files), Files: files}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, fmt.Errorf("encode manifest: %w", err)
	}
	if err := fsutil.WriteFileSync(filepath.Join(tmp, ManifestFile), append(b, '\n')); err != nil {
		return m, fmt.Errorf("write manifest: %w", err)
	}
	if err := fsutil.SyncDir(tmp); err != nil {
		return m, fmt.Errorf("export to %s: %w", dir, err)
	}
	if ctx.Err() != nil {
		return m, interrupted(ctx, dir)
	}
	if err := swapIn(tmp, dst); err != nil {
		return m, fmt.Errorf("export to %s: %w", dir, err)
	}
	return m, nil
}

// interrupted is the error of an export stopped by ctx before dir was
// written.
func interrupted(ctx context.Context, dir string) error {
	return fmt.Errorf("export to %s: interrupted before it was written, nothing changed there: %w", dir, ctx.Err())
}

// spareRun refuses a dst that overlaps the run's data directory (its
// adapters and job records) or the adapter directory of one of its steps:
// the export, forced or not, would replace them or write into them, and
// the run's steps would name other weights than they trained.
func spareRun(cp Checkpoint, dir, dst string) error {
	if cp.Run.DataDir != "" {
		if data := realPath(cp.Run.DataDir); within(data, dst) || within(dst, data) {
			return fmt.Errorf("export to %s: overlaps the data directory %s of run %s (its adapters and job records), which an export would replace or write into; choose a directory outside it", dir, cp.Run.DataDir, cp.Run.Name)
		}
	}
	for _, s := range cp.Steps {
		if s.Adapter == nil || s.Adapter.Path == "" || s.Step == cp.Step.Step {
			continue // the exported step's own adapter is checked as the source
		}
		if a := realPath(s.Adapter.Path); within(a, dst) || within(dst, a) {
			return fmt.Errorf("export to %s: overlaps the adapter directory %s of run %s step %d, which an export would replace or write into; choose another directory", dir, s.Adapter.Path, cp.Run.Name, s.Step)
		}
	}
	return nil
}

// mkdirTemp is os.MkdirTemp with the mode of every other directory grpo
// writes, 0755 less the umask (os.MkdirTemp's is 0700): the export is
// read by other users, an inference server among them.
func mkdirTemp(parent, prefix string) (string, error) {
	for range 100 {
		dir := filepath.Join(parent, fmt.Sprintf("%s%016x", prefix, rand.Uint64()))
		err := os.Mkdir(dir, 0o755)
		if !errors.Is(err, fs.ErrExist) {
			return dir, err
		}
	}
	return "", fmt.Errorf("create a temporary directory in %s: names taken", parent)
}

// checkTarget refuses a dst that is a file, a non-empty directory without
// force, or a symbolic link without force (with force the link itself is
// replaced, never what it points to).
func checkTarget(dst string, force bool) error {
	if li, err := os.Lstat(dst); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		if force {
			return nil
		}
		target, _ := os.Readlink(dst)
		return fmt.Errorf("export to %s: it is a symbolic link (to %s); an export replaces the link, not what it points to: pass --force to replace the link, or name a directory", dst, target)
	}
	fi, err := os.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("export to %s: %w", dst, err)
	case !fi.IsDir():
		return fmt.Errorf("export to %s: it is a file, not a directory", dst)
	}
	ents, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("export to %s: %w", dst, err)
	}
	if len(ents) > 0 && !force {
		return fmt.Errorf("export to %s: %w (%d entries); pass --force to replace it, or choose a new directory", dst, ErrNotEmpty, len(ents))
	}
	return nil
}

// realPath is p made absolute, with the symbolic links of its longest
// existing ancestor resolved, so that two paths naming one directory
// through links compare equal.
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(dir) == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// copyTree copies the regular files under src into dst (following
// symbolic links to files), syncing each, and returns them sorted by path.
// It stops when ctx is cancelled.
func copyTree(ctx context.Context, src, dst string) ([]FileHash, error) {
	var files []FileHash
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			return nil
		}
		if rel == ManifestFile {
			return nil // a manifest of an earlier export is not adapter content
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		fh, err := copyFile(ctx, path, filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		fh.Path = filepath.ToSlash(rel)
		files = append(files, fh)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files in %s", src)
	}
	// Sync the copied directories so the renames are durable.
	err = filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = fsutil.SyncDir(path)
		}
		return err
	})
	slices.SortFunc(files, func(a, b FileHash) int { return strings.Compare(a.Path, b.Path) })
	return files, err
}

func copyFile(ctx context.Context, src, dst string) (FileHash, error) {
	in, err := os.Open(src)
	if err != nil {
		return FileHash{}, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileHash{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), ctxReader{ctx, in})
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FileHash{}, fmt.Errorf("copy %s: %w", src, err)
	}
	return FileHash{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// ctxReader reads r until ctx is cancelled: a large adapter's copy stops
// within a buffer (io.Copy's 32 KiB) of Ctrl-C.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// TreeHash is the content hash of files (see AdapterFiles.SHA256); files
// must be sorted by Path.
func TreeHash(files []FileHash) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s  %s\n", f.SHA256, f.Path)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// HashDir computes the content hash of the files under dir as Export
// does, leaving out the manifest: it verifies an export.
func HashDir(dir string) (string, []FileHash, error) {
	var files []FileHash
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == ManifestFile {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		files = append(files, FileHash{Path: filepath.ToSlash(rel), Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("hash %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b FileHash) int { return strings.Compare(a.Path, b.Path) })
	return TreeHash(files), files, nil
}

// swapIn renames the complete directory tmp to dst. An existing dst (empty,
// or replaced with force) is moved aside first and removed after the
// swap, so dst always names a complete directory.
func swapIn(tmp, dst string) error {
	parent := filepath.Dir(dst)
	var aside string
	if _, err := os.Lstat(dst); err == nil {
		aside = filepath.Join(parent, fmt.Sprintf(".grpo-old-%s-%016x", filepath.Base(dst), rand.Uint64()))
		if err := os.Rename(dst, aside); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if aside != "" {
			os.Rename(aside, dst)
		}
		return err
	}
	if err := fsutil.SyncDir(parent); err != nil {
		return err
	}
	if aside != "" {
		return os.RemoveAll(aside)
	}
	return nil
}
