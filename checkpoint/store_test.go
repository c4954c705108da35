package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// mustOpen returns a Store on a new file in a temporary directory. At
// cleanup it checks the file's consistency with tx.Check.
func mustOpen(tb testing.TB) *Store {
	tb.Helper()
	s := New(filepath.Join(tb.TempDir(), "grpo.db"), Options{Timeout: 2 * time.Second})
	tb.Cleanup(func() { mustCheck(tb, s.Path()) })
	return s
}

// mustCheck runs bbolt's consistency check on the file at path, if any.
func mustCheck(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		tb.Fatalf("check %s: %v", path, err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}); err != nil {
		tb.Fatalf("check %s: %v", path, err)
	}
}

func mustCreateRun(tb testing.TB, s *Store, name string) {
	tb.Helper()
	if err := s.CreateRun(context.Background(), Run{Name: name, Steps: 16, Policy: PolicyBestValidation, Metric: MetricRewardMean}); err != nil {
		tb.Fatal(err)
	}
}

func TestStore_ReadMissingFile(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)

	_, err := s.GetRun(ctx, "dp5")
	if !errors.Is(err, ErrNoDatabase) || !errors.Is(err, ErrRunNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("GetRun()=%v, want ErrNoDatabase, ErrRunNotFound and fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("GetRun()=%q, want the file named", err)
	}
	if _, err := s.ListRuns(ctx); !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("ListRuns()=%v, want ErrNoDatabase naming %s", err, s.Path())
	}
	if _, _, _, err := s.Snapshot(ctx, "dp5"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("Snapshot()=%v, want ErrRunNotFound", err)
	}
	if got, err := s.GetInFlight(ctx, "dp5"); !errors.Is(err, ErrRunNotFound) || got != nil {
		t.Fatalf("GetInFlight()=%v, %v, want nil, ErrRunNotFound", got, err)
	}
	if got, err := s.UniqueRunName(ctx, "dp5"); err != nil || got != "dp5-1" {
		t.Fatalf("UniqueRunName()=%q, %v, want dp5-1", got, err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after reads, Stat(%s)=%v, want the file not created", s.Path(), err)
	}
}

func TestStore_NotADatabase(t *testing.T) {
	ctx := context.Background()
	for name, content := range map[string][]byte{
		"text":  []byte("this is not a database\n"),
		"pages": []byte(strings.Repeat("garbage!", 2048)), // 16 KiB: whole pages that are not meta pages
		"empty": {},
	} {
		t.Run(name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "grpo.db"), Options{Timeout: time.Second})
			if err := os.WriteFile(s.Path(), content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.ListRuns(ctx)
			if !errors.Is(err, ErrNotDatabase) || !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("ListRuns()=%v, want ErrNotDatabase naming %s", err, s.Path())
			}
			err = s.CreateRun(ctx, Run{Name: "dp5"})
			if len(content) == 0 {
				// A write initialises an empty file, as bbolt does.
				if err != nil {
					t.Fatalf("CreateRun() on an empty file: %v", err)
				}
				mustCheck(t, s.Path())
				return
			}
			if !errors.Is(err, ErrNotDatabase) || !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("CreateRun()=%v, want ErrNotDatabase naming %s", err, s.Path())
			}
			if got, err := os.ReadFile(s.Path()); err != nil || string(got) != string(content) {
				t.Fatalf("file changed by a failed write (err %v)", err)
			}
		})
	}
}

func TestStore_Directory(t *testing.T) {
	s := New(t.TempDir(), Options{Timeout: time.Second})
	if _, err := s.ListRuns(context.Background()); !errors.Is(err, ErrNotDatabase) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("ListRuns()=%v, want ErrNotDatabase saying it is a directory", err)
	}
}

// TestStore_LockedByAnotherOpen holds the file open for writing, as a
// process that keeps it open would: reads and writes give up after the
// timeout with an error naming the file.
func TestStore_LockedByAnotherOpen(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")

	holder, err := bolt.Open(s.Path(), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	short := New(s.Path(), Options{Timeout: 100 * time.Millisecond})
	_, err = short.GetRun(ctx, "dp5")
	if !errors.Is(err, ErrLocked) || !errors.Is(err, berrors.ErrTimeout) {
		t.Fatalf("GetRun()=%v, want ErrLocked and bbolt's ErrTimeout", err)
	}
	if got, want := err.Error(), fmt.Sprintf("database %s is locked by another process", s.Path()); !strings.Contains(got, want) {
		t.Fatalf("GetRun()=%q, want it to contain %q", got, want)
	}
	if err := short.SetRunState(ctx, "dp5", StateFailed, "boom"); !errors.Is(err, ErrLocked) {
		t.Fatalf("SetRunState()=%v, want ErrLocked", err)
	}

	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if run, err := short.GetRun(ctx, "dp5"); err != nil || run.State != StateRunning {
		t.Fatalf("after release, GetRun()=%+v, %v, want the running run", run, err)
	}
}

// TestStore_ReadersShareFile shows that reads open the file read-only: they
// work beside another read-only open, which a write cannot.
func TestStore_ReadersShareFile(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")

	reader, err := bolt.Open(s.Path(), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	short := New(s.Path(), Options{Timeout: 100 * time.Millisecond})
	if _, err := short.GetRun(ctx, "dp5"); err != nil {
		t.Fatalf("GetRun() beside a reader: %v", err)
	}
	if _, err := short.ListRuns(ctx); err != nil {
		t.Fatalf("ListRuns() beside a reader: %v", err)
	}
	if err := short.CommitStep(ctx, "dp5", Step{Step: 0, N: 5}, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("CommitStep() beside a reader=%v, want ErrLocked", err)
	}
}

// TestStore_ReleasesFile shows that a Store holds the file only while a
// method runs, so another process can open it for writing in between.
func TestStore_ReleasesFile(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	if _, err := s.GetRun(ctx, "dp5"); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(s.Path(), 0o600, &bolt.Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("open for writing after the Store's calls: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStore_CancelledContext(t *testing.T) {
	s := mustOpen(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.CreateRun(ctx, Run{Name: "dp5"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateRun()=%v, want context.Canceled", err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat()=%v, want no file", err)
	}
}

// TestStore_OtherProcess runs a second process that holds the file for
// writing, as `grpo run` would if it kept it open.
func TestStore_OtherProcess(t *testing.T) {
	if path := os.Getenv("CHECKPOINT_TEST_HOLD"); path != "" {
		holdFile(path)
		return
	}
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")

	cmd := exec.Command(os.Args[0], "-test.run=^TestStore_OtherProcess$")
	cmd.Env = append(os.Environ(), "CHECKPOINT_TEST_HOLD="+s.Path())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}

	short := New(s.Path(), Options{Timeout: 100 * time.Millisecond})
	if _, err := short.GetRun(ctx, "dp5"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("GetRun() while another process holds the file=%v, want ErrLocked naming it", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if _, err := short.GetRun(ctx, "dp5"); err != nil {
		t.Fatalf("GetRun() after the holder exited: %v", err)
	}
}

// holdFile opens path for writing, says so, and holds it until stdin closes.
func holdFile(path string) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("holding")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if err := db.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// TestStore_Concurrent uses two Stores on one file from many goroutines;
// they share the in-process lock instead of contending for the file lock.
func TestStore_Concurrent(t *testing.T) {
	ctx := context.Background()
	a := mustOpen(t)
	b := New(a.Path(), Options{Timeout: 2 * time.Second})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			name := fmt.Sprintf("run-%d", i)
			if err := s.CreateRun(ctx, Run{Name: name}); err != nil {
				errs <- err
				return
			}
			for step := range 5 {
				if err := s.CommitStep(ctx, name, Step{Step: step}, &Evaluation{Step: step, RewardMean: float64(step)}); err != nil {
					errs <- err
					return
				}
				if _, err := s.ListRuns(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	runs, err := a.ListRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(runs), 4; got != want {
		t.Fatalf("len(ListRuns())=%d, want %d", got, want)
	}
	for _, r := range runs {
		if r.Steps != 4 || r.BestStep != 4 {
			t.Fatalf("run %s: steps %d best %d, want 4 and 4", r.Name, r.Steps, r.BestStep)
		}
	}
}

func TestStore_WriteMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	s := New(filepath.Join(dir, "grpo.db"), Options{Timeout: time.Second})
	err := s.CreateRun(context.Background(), Run{Name: "dp5"})
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), "directory "+dir+" does not exist") {
		t.Fatalf("CreateRun()=%v, want it to say directory %s does not exist", err, dir)
	}
}
