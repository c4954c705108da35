package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/promote"
)

// startRefmodel runs the real binary's `refmodel serve` on a loopback
// port over dataDir and returns its OpenAI base URL; it is killed at
// cleanup.
func startRefmodel(t *testing.T, dataDir string) string {
	t.Helper()
	bin := buildBinary(t)
	cmd := exec.Command(bin, "refmodel", "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1024) // buffered: a line sent while the test is not reading is kept
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	deadline := time.After(testutil.Patience)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("refmodel serve exited before serving")
			}
			if _, rest, ok := strings.Cut(l, "OpenAI base URL "); ok {
				return strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
		case <-deadline:
			t.Fatalf("refmodel serve did not say where it serves within %s", testutil.Patience)
		}
	}
}

type bestJSON struct {
	Step    int                          `json:"step"`
	Value   float64                      `json:"value"`
	Adapter *struct{ Name, Path string } `json:"adapter"`
}

// TestExportPromoteServe plays a run on the embedded backend, exports its
// selected step, then serves the run's adapters with `grpo refmodel serve`
// after the run ended and promotes into it, twice, and evaluates the
// stable name.
func TestExportPromoteServe(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(smallRun), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db, "--quiet"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	code, out, errs := cli(t, "best", "small", "--db", db, "--json")
	var best bestJSON
	if code != 0 || json.Unmarshal([]byte(out), &best) != nil {
		t.Fatalf("best --json: %d %s %s", code, out, errs)
	}

	// Export: the manifest agrees with `grpo best --json`, the hash with
	// the files.
	exp := filepath.Join(dir, "export")
	code, out, errs = cli(t, "best", "small", "--db", db, "--export", exp, "--json")
	var m promote.Manifest
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
		t.Fatalf("best --export: %d %s %s", code, out, errs)
	}
	raw, _ := os.ReadFile(filepath.Join(exp, promote.ManifestFile))
	var disk promote.Manifest
	if err := json.Unmarshal(raw, &disk); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if disk.Run != "small" || disk.Step != best.Step || disk.Value == nil || *disk.Value != best.Value || disk.SelectedBy != "best" {
		t.Fatalf("manifest step %d value %v, best --json step %d value %v", disk.Step, disk.Value, best.Step, best.Value)
	}
	if best.Adapter != nil {
		sum, _, err := promote.HashDir(exp)
		if err != nil || disk.Adapter == nil || sum != disk.Adapter.SHA256 || disk.Adapter.Source != best.Adapter.Path {
			t.Fatalf("hash %s (%v), manifest adapter %+v", sum, err, disk.Adapter)
		}
	}
	// Not over a non-empty directory, unless forced.
	if code, _, errs := cli(t, "best", "small", "--db", db, "--export", exp, "--step", "last"); code != 1 || !strings.Contains(errs, "not empty") || !strings.Contains(errs, "--force") {
		t.Fatalf("export over a non-empty dir: %d %s", code, errs)
	}
	code, out, errs = cli(t, "best", "small", "--db", db, "--export", exp, "--step", "last", "--force")
	if code != 0 || !strings.Contains(out, "step 3 (last") {
		t.Fatalf("forced export: %d %s %s", code, out, errs)
	}
	code, out, _ = cli(t, "best", "small", "--db", db, "--export", filepath.Join(dir, "base"), "--step", "base")
	if code != 0 || !strings.Contains(out, "no adapter") {
		t.Fatalf("base export: %d %s", code, out)
	}
	if code, _, errs := cli(t, "best", "small", "--db", db, "--step", "last"); code != 2 || !strings.Contains(errs, "--export") {
		t.Fatalf("--step without --export: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "best", "small", "--db", db, "--export", exp, "--step", "soon"); code != 2 || !strings.Contains(errs, "soon") {
		t.Fatalf("bad --step: %d %s", code, errs)
	}

	// Every step's adapter is still on disk (grpo deletes none), and
	// runs show says so.
	code, out, _ = cli(t, "runs", "show", "small", "--db", db, "--json")
	var show struct {
		Steps []struct {
			Step    int                          `json:"step"`
			Adapter *struct{ Name, Path string } `json:"adapter"`
			OnDisk  *bool                        `json:"adapter_on_disk"`
		} `json:"steps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &show) != nil || len(show.Steps) != 4 {
		t.Fatalf("runs show: %d %s", code, out)
	}
	for _, s := range show.Steps[1:] {
		if s.Adapter == nil || s.OnDisk == nil || !*s.OnDisk {
			t.Fatalf("step %d: adapter %+v on disk %v", s.Step, s.Adapter, s.OnDisk)
		}
	}
	if _, out, _ := cli(t, "runs", "show", "small", "--db", db); !strings.Contains(out, "on disk") {
		t.Fatalf("runs show table lacks the adapter column:\n%s", out)
	}

	// The run used the embedded backend: no endpoint left to promote into.
	if code, _, errs := cli(t, "promote", "small", "--db", db); code != 1 || !strings.Contains(errs, "refmodel serve --data-dir") {
		t.Fatalf("promote without endpoints: %d %s", code, errs)
	}

	url := startRefmodel(t, db+".data")
	admin := inference.NewAdminClient(url, inference.AdminOptions{})
	servedRoot := func(name string) string {
		models, err := admin.Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range models {
			if m.ID == name {
				return m.Root
			}
		}
		return ""
	}
	// The run's step adapters are served under their names.
	if servedRoot(show.Steps[1].Adapter.Name) != show.Steps[1].Adapter.Path {
		t.Fatalf("refmodel serve does not serve %s from %s", show.Steps[1].Adapter.Name, show.Steps[1].Adapter.Path)
	}

	first := []string{"promote", "small", "--db", db, "--endpoint", url, "--json"}
	want := best
	if best.Adapter == nil {
		// The base model won: nothing to promote; promote step 1 instead.
		if code, _, errs := cli(t, first...); code != 1 || !strings.Contains(errs, "base model") {
			t.Fatalf("promote of the base: %d %s", code, errs)
		}
		first = append(first, "--step", "1")
		want = bestJSON{Step: 1, Adapter: show.Steps[1].Adapter}
	}
	code, out, errs = cli(t, first...)
	var res promote.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("promote: %d %s %s", code, out, errs)
	}
	if res.Name != "small-best" || res.Step != want.Step || len(res.Endpoints) != 1 || res.Endpoints[0].Action != "loaded" {
		t.Fatalf("promote result %+v", res)
	}
	if got := servedRoot("small-best"); got != want.Adapter.Path {
		t.Fatalf("small-best served from %q, want the step's adapter %s", got, want.Adapter.Path)
	}
	// Twice: in place, now another step.
	other := 1
	if want.Step == 1 {
		other = 2
	}
	code, out, errs = cli(t, "promote", "small", "--db", db, "--endpoint", url, "--step", fmt.Sprint(other))
	if code != 0 || !strings.Contains(out, "replaced") || !strings.Contains(out, want.Adapter.Path) || !strings.Contains(out, `clients call model "small-best"`) {
		t.Fatalf("second promote: %d %s %s", code, out, errs)
	}
	if got := servedRoot("small-best"); got != show.Steps[other].Adapter.Path {
		t.Fatalf("after the second promote small-best is served from %q, want %s", got, show.Steps[other].Adapter.Path)
	}
	// eval calls the stable name.
	code, out, errs = cli(t, "eval", "--base-url", url, "--model", "small-best", "--episodes", "2", "--json")
	if code != 0 || !strings.Contains(out, `"model":"small-best"`) {
		t.Fatalf("eval of the promoted name: %d %s %s", code, out, errs)
	}
	if code, _, errs := cli(t, "promote", "small", "--db", db, "--endpoint", url, "--as", "no spaces"); code != 2 || !strings.Contains(errs, "no spaces") {
		t.Fatalf("bad --as: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "promote", "--db", db); code != 2 || !strings.Contains(errs, "run name") {
		t.Fatalf("promote without a run: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "promote", "small", "--db", db, "--endpoint", "127.0.0.1:18000"); code != 2 || !strings.Contains(errs, `--endpoint "127.0.0.1:18000": want an http:// or https:// URL`) {
		t.Fatalf("--endpoint without a scheme: %d %s", code, errs)
	}
	// A name of the form of a run's own adapters would replace one.
	if code, _, errs := cli(t, "promote", "small", "--db", db, "--endpoint", url, "--as", "small.0123456789abcdef-step-0001"); code != 2 || !strings.Contains(errs, "form of a run's own adapter names") {
		t.Fatalf("--as a run adapter's name: %d %s", code, errs)
	}
}
