package promote_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/promote"
)

// TestExportOntoSymlink: an export onto a symbolic link — to an empty
// directory or to none — is refused without --force, the link and what
// it points to left as they were; with --force the link (not its target)
// is replaced by the export.
func TestExportOntoSymlink(t *testing.T) {
	f := newFixture(t)
	cp := f.resolve(t, promote.Pick{By: "last"})
	empty := filepath.Join(f.dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{empty, filepath.Join(f.dir, "missing")} {
		link := filepath.Join(f.dir, "link-to-"+filepath.Base(target))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		_, err := promote.Export(context.Background(), cp, link, false, time.Now())
		if err == nil || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("export onto a link to %s: %v, want it refused, naming the link and --force", target, err)
		}
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Fatalf("link after a refused export: %q %v, want it still to %s", got, err, target)
		}
		if _, err := promote.Export(context.Background(), cp, link, true, time.Now()); err != nil {
			t.Fatalf("forced export onto a link to %s: %v", target, err)
		}
		if fi, err := os.Lstat(link); err != nil || !fi.IsDir() {
			t.Fatalf("%s after a forced export: %v, want a directory", link, err)
		}
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Fatalf("the link's target %s: %d entries (%v), want it untouched and empty", empty, len(ents), err)
	}
}

// TestExportMode: the export directory has the mode of every directory
// grpo creates, 0755 less the umask, not os.MkdirTemp's 0700.
func TestExportMode(t *testing.T) {
	f := newFixture(t)
	ref := filepath.Join(f.dir, "ref")
	if err := os.Mkdir(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(ref)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(f.dir, "out")
	if _, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "last"}), out, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	got, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode().Perm() != want.Mode().Perm() {
		t.Fatalf("export directory mode %v, want %v (0755 less the umask)", got.Mode().Perm(), want.Mode().Perm())
	}
}
