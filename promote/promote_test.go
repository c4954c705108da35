package promote_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/refmodel"
)

// fixture is a stored run of three steps whose adapters are real
// reference-policy adapters on disk. Validation rewards 0.1, 0.5, 0.3,
// 0.2 make step 1 the best and step 3 the last.
type fixture struct {
	store    *checkpoint.Store
	dir      string
	adapters map[int]string // step -> adapter directory
}

var rewards = []float64{0.1, 0.5, 0.3, 0.2}

func newFixture(t *testing.T, endpoints ...string) *fixture {
	t.Helper()
	return newRunFixture(t, false, endpoints...)
}

// newRunFixture is newFixture; with dataDir the run records its adapters'
// directory, dir/data, as a run on the embedded backend does.
func newRunFixture(t *testing.T, dataDir bool, endpoints ...string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{store: checkpoint.New(filepath.Join(dir, "grpo.db"), checkpoint.Options{}), dir: dir, adapters: map[int]string{}}
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = "r1", 3
	cfg.Trainer.BaseModel, cfg.Inference.Model = "Qwen/Qwen3-14B", "Qwen/Qwen3-14B"
	for _, u := range endpoints {
		cfg.Inference.Endpoints = append(cfg.Inference.Endpoints, config.Endpoint{URL: u, APIKeyEnv: "TEST_KEY"})
	}
	ctx := context.Background()
	rec := checkpoint.Run{Name: "r1", Config: cfg.JSON(), Steps: 3,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}
	if dataDir {
		rec.DataDir = filepath.Join(dir, "data")
	}
	if err := f.store.CreateRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for step, r := range rewards {
		s := checkpoint.Step{Step: step, N: 5}
		if step > 0 {
			a, err := refmodel.NewAdapter(2, 4, uint64(step))
			if err != nil {
				t.Fatal(err)
			}
			a.B[0] = float64(step) // distinct weights per step
			path := filepath.Join(dir, "data", "adapters", "r1-step-000"+string(rune('0'+step)))
			if err := a.Save(path); err != nil {
				t.Fatal(err)
			}
			f.adapters[step] = path
			s.Adapter = &checkpoint.Adapter{Name: filepath.Base(path), Path: path}
		}
		ev := &checkpoint.Evaluation{Step: step, Episodes: 4, RewardMean: r, MealsMean: float64(step), DeadlockRate: 0.5}
		if err := f.store.CommitStep(ctx, "r1", s, ev); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) resolve(t *testing.T, pick promote.Pick) promote.Checkpoint {
	t.Helper()
	cp, err := promote.Resolve(context.Background(), f.store, "r1", pick)
	if err != nil {
		t.Fatalf("Resolve(%+v): %v", pick, err)
	}
	return cp
}

func TestParsePick(t *testing.T) {
	for in, want := range map[string]promote.Pick{
		"": {By: "best"}, "best": {By: "best"}, "last": {By: "last"}, "base": {By: "base"}, "7": {By: "step", Step: 7}, "0": {By: "step"},
	} {
		if got, err := promote.ParsePick(in); err != nil || got != want {
			t.Errorf("ParsePick(%q)=%+v, %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "first", "1.5"} {
		if _, err := promote.ParsePick(in); err == nil || !strings.Contains(err.Error(), in) || !strings.Contains(err.Error(), "best, last, base") {
			t.Errorf("ParsePick(%q) error %v, want one naming the input and the accepted values", in, err)
		}
	}
}

func TestResolve(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		pick promote.Pick
		step int
	}{{promote.Pick{By: "best"}, 1}, {promote.Pick{By: "last"}, 3}, {promote.Pick{By: "base"}, 0}, {promote.Pick{By: "step", Step: 2}, 2}} {
		cp := f.resolve(t, c.pick)
		if cp.Step.Step != c.step || cp.Validation == nil || cp.Validation.RewardMean != rewards[c.step] || cp.Selection == nil || cp.Selection.Step != 1 {
			t.Errorf("Resolve(%+v): step %d validation %+v selection %+v, want step %d", c.pick, cp.Step.Step, cp.Validation, cp.Selection, c.step)
		}
		if (cp.Adapter() == nil) != (c.step == 0) {
			t.Errorf("Resolve(%+v): adapter %+v", c.pick, cp.Adapter())
		}
	}
	_, err := promote.Resolve(context.Background(), f.store, "r1", promote.Pick{By: "step", Step: 9})
	if err == nil || !strings.Contains(err.Error(), "no committed step 9") {
		t.Fatalf("step 9: %v", err)
	}
	if _, err := promote.Resolve(context.Background(), f.store, "nope", promote.Pick{By: "best"}); !errors.Is(err, checkpoint.ErrRunNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}

func TestExport(t *testing.T) {
	f := newFixture(t)
	// Step 1 was measured on the test split; step 3 was not.
	te := checkpoint.TestEvaluation{Split: checkpoint.SplitTest, Seed: 2000000,
		Evaluation: checkpoint.Evaluation{Step: 1, RewardMean: 0.42, Episodes: 100}}
	if err := f.store.PutTestEvaluation(context.Background(), "r1", te); err != nil {
		t.Fatal(err)
	}
	cp := f.resolve(t, promote.Pick{By: "best"})
	out := filepath.Join(f.dir, "export", "best")
	m, err := promote.Export(context.Background(), cp, out, false, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	// The manifest on disk is the one returned, and agrees with the
	// selection (`grpo best --json`).
	raw, err := os.ReadFile(filepath.Join(out, promote.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var disk promote.Manifest
	if err := json.Unmarshal(raw, &disk); err != nil {
		t.Fatal(err)
	}
	if disk.Run != "r1" || disk.Step != 1 || disk.SelectedBy != "best" || disk.Value == nil || *disk.Value != 0.5 ||
		disk.Metric != "reward_mean" || disk.Selection == nil || disk.Selection.Step != 1 || disk.Selection.Value != 0.5 ||
		disk.Validation == nil || disk.Validation.RewardMean != 0.5 || disk.BaseModel != "Qwen/Qwen3-14B" ||
		disk.LoRA.Rank != 8 || disk.Format != promote.ManifestFormat || !disk.Exported.Equal(m.Exported) ||
		disk.Test == nil || disk.Test.Seed != 2000000 || disk.Test.Evaluation.Step != 1 || disk.Test.Evaluation.RewardMean != 0.42 {
		t.Fatalf("manifest %s", raw)
	}
	var cfg map[string]any
	if err := json.Unmarshal(disk.Config, &cfg); err != nil || cfg["run"].(map[string]any)["name"] != "r1" {
		t.Fatalf("manifest config: %v %s", err, disk.Config)
	}
	// The files are the adapter's, byte for byte, and the hash is theirs.
	for _, name := range []string{refmodel.ConfigFile, refmodel.WeightsFile} {
		a, _ := os.ReadFile(filepath.Join(f.adapters[1], name))
		b, _ := os.ReadFile(filepath.Join(out, name))
		if len(a) == 0 || string(a) != string(b) {
			t.Fatalf("%s differs from the source", name)
		}
	}
	sum, files, err := promote.HashDir(out)
	if err != nil || disk.Adapter == nil || sum != disk.Adapter.SHA256 || len(files) != 2 || len(disk.Adapter.Files) != 2 ||
		disk.Adapter.Name != "r1-step-0001" || disk.Adapter.Source != f.adapters[1] {
		t.Fatalf("hash %s %v; manifest adapter %+v", sum, err, disk.Adapter)
	}
	// A loadable adapter: the reference backend reads the export.
	if _, err := refmodel.LoadAdapter(out); err != nil {
		t.Fatalf("export not loadable: %v", err)
	}
	// No temporary directory is left beside it.
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Fatalf("export parent holds %d entries, want 1", len(ents))
	}

	// A non-empty directory is refused, and left alone.
	_, err = promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "last"}), out, false, time.Now())
	if !errors.Is(err, promote.ErrNotEmpty) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("export over a non-empty dir: %v", err)
	}
	if again, _, _ := promote.HashDir(out); again != sum {
		t.Fatal("a refused export changed the directory")
	}
	// Not even force replaces a directory holding the store the
	// checkpoint is read from.
	for _, dir := range []string{filepath.Dir(f.store.Path()), filepath.Dir(filepath.Dir(f.store.Path()))} {
		before, err := os.ReadFile(f.store.Path())
		if err != nil {
			t.Fatal(err)
		}
		_, err = promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "last"}), dir, true, time.Now())
		if err == nil || !strings.Contains(err.Error(), "holds the store "+f.store.Path()) {
			t.Fatalf("forced export into %s, which holds the store: %v", dir, err)
		}
		if after, err := os.ReadFile(f.store.Path()); err != nil || string(after) != string(before) {
			t.Fatalf("the refused export touched the store: %v", err)
		}
	}
	// force replaces it with the other step.
	m3, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "last"}), out, true, time.Now())
	if err != nil || m3.Step != 3 || m3.Value == nil || *m3.Value != 0.2 || m3.Adapter.SHA256 == sum || m3.Test != nil {
		t.Fatalf("forced export: %+v %v", m3, err)
	}
	if now, _, _ := promote.HashDir(out); now != m3.Adapter.SHA256 {
		t.Fatal("forced export: hash on disk differs from the manifest")
	}
	// An empty directory is fine without force.
	empty := filepath.Join(f.dir, "empty")
	os.Mkdir(empty, 0o755)
	if _, err := promote.Export(context.Background(), cp, empty, false, time.Now()); err != nil {
		t.Fatalf("export into an empty dir: %v", err)
	}
	// The base model: manifest only.
	base := filepath.Join(f.dir, "base")
	mb, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "base"}), base, false, time.Now())
	if err != nil || mb.Adapter != nil || mb.Step != 0 || *mb.Value != 0.1 {
		t.Fatalf("base export: %+v %v", mb, err)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 1 || ents[0].Name() != promote.ManifestFile {
		t.Fatalf("base export wrote %v, want the manifest only", ents)
	}
	// A file, and the adapter's own directory, are refused.
	file := filepath.Join(f.dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := promote.Export(context.Background(), cp, file, true, time.Now()); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("export to a file: %v", err)
	}
	if _, err := promote.Export(context.Background(), cp, f.adapters[1], true, time.Now()); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("export over the source: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.adapters[1], refmodel.WeightsFile)); err != nil {
		t.Fatal("the source adapter was harmed")
	}
	// An adapter that is not on this machine is named.
	os.RemoveAll(f.adapters[2])
	_, err = promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "step", Step: 2}), filepath.Join(f.dir, "two"), false, time.Now())
	if err == nil || !strings.Contains(err.Error(), f.adapters[2]) || !strings.Contains(err.Error(), "not on this machine") {
		t.Fatalf("missing adapter: %v", err)
	}
}

// TestExportSparesTheRun: not even --force lets an export replace, or
// write into, the run's data directory or another step's adapter
// directory: `--step base --force` into the data directory replaced every
// adapter and job record of the run with a manifest, and an export into
// step 2's directory gave step 2 step 3's weights.
func TestExportSparesTheRun(t *testing.T) {
	for _, dataDir := range []bool{true, false} {
		f := newRunFixture(t, dataDir)
		data := filepath.Join(f.dir, "data")
		os.MkdirAll(filepath.Join(data, "jobs"), 0o755)
		os.WriteFile(filepath.Join(data, "jobs", "j1.json"), []byte("{}"), 0o644)
		hashes := map[int]string{}
		for step, dir := range f.adapters {
			hashes[step], _, _ = promote.HashDir(dir)
		}
		for _, c := range []struct {
			pick promote.Pick
			dir  string
			want string // in the error
		}{
			{promote.Pick{By: "step", Step: 3}, f.adapters[2], "step 2"},
			{promote.Pick{By: "step", Step: 3}, filepath.Join(f.adapters[2], "sub"), "step 2"},
			{promote.Pick{By: "base"}, filepath.Join(data, "adapters"), "step 1"},
			{promote.Pick{By: "base"}, f.adapters[1], "step 1"},
		} {
			if dataDir {
				c.want = "data directory " + data
			}
			_, err := promote.Export(context.Background(), f.resolve(t, c.pick), c.dir, true, time.Now())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.dir) || !strings.Contains(err.Error(), "choose") {
				t.Errorf("data dir %v: forced export of %+v to %s: %v, want it refused naming %q", dataDir, c.pick, c.dir, err, c.want)
			}
		}
		// Through a link to the adapters' directory, the same.
		link := filepath.Join(f.dir, "adapters-link")
		if err := os.Symlink(filepath.Join(data, "adapters"), link); err != nil {
			t.Fatal(err)
		}
		want := "step 2"
		if dataDir {
			want = "data directory " + data
		}
		through := filepath.Join(link, filepath.Base(f.adapters[2]))
		if _, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "base"}), through, true, time.Now()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("data dir %v: forced export of the base to %s: %v, want it refused naming %q", dataDir, through, err, want)
		}
		// A link that is the directory itself is replaced, not followed.
		own := filepath.Join(f.dir, "step2-link")
		if err := os.Symlink(f.adapters[2], own); err != nil {
			t.Fatal(err)
		}
		if _, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "base"}), own, true, time.Now()); err != nil {
			t.Errorf("data dir %v: forced export over the link %s: %v", dataDir, own, err)
		}
		if fi, err := os.Lstat(own); err != nil || !fi.IsDir() {
			t.Errorf("data dir %v: %s after a forced export: %v, want a directory", dataDir, own, err)
		}
		if dataDir {
			for _, dir := range []string{data, filepath.Join(data, "jobs"), filepath.Join(data, "exports", "best")} {
				_, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "base"}), dir, true, time.Now())
				if err == nil || !strings.Contains(err.Error(), "overlaps the data directory "+data+" of run r1") {
					t.Errorf("forced export of the base into %s: %v, want it refused naming the data directory", dir, err)
				}
			}
		}
		for step, dir := range f.adapters {
			if got, files, err := promote.HashDir(dir); err != nil || got != hashes[step] || len(files) != 2 {
				t.Errorf("data dir %v: step %d's adapter changed: %v, %d files", dataDir, step, err, len(files))
			}
		}
		if _, err := os.Stat(filepath.Join(data, "jobs", "j1.json")); err != nil {
			t.Errorf("data dir %v: the job record is gone: %v", dataDir, err)
		}
		// Beside them is fine.
		if _, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "step", Step: 3}), filepath.Join(f.dir, "out"), true, time.Now()); err != nil {
			t.Errorf("data dir %v: export beside the run's directories: %v", dataDir, err)
		}
	}
}

// TestExportInterrupted: an export whose context is cancelled (Ctrl-C)
// writes nothing: no directory, no temporary one beside it, and a
// directory --force would have replaced is left as it was. It copied and
// renamed in place regardless, and exited 0.
func TestExportInterrupted(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := filepath.Join(f.dir, "exports")
	os.Mkdir(parent, 0o755)
	out := filepath.Join(parent, "best")
	for _, pick := range []promote.Pick{{By: "best"}, {By: "base"}} {
		_, err := promote.Export(ctx, f.resolve(t, pick), out, false, time.Now())
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "export to "+out+": interrupted") {
			t.Fatalf("cancelled export of %+v: %v, want context.Canceled naming %s", pick, err, out)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 0 {
			t.Fatalf("cancelled export of %+v left %v in %s, want nothing", pick, ents, parent)
		}
	}
	m, err := promote.Export(context.Background(), f.resolve(t, promote.Pick{By: "last"}), out, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := promote.Export(ctx, f.resolve(t, promote.Pick{By: "best"}), out, true, time.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled forced export: %v, want context.Canceled", err)
	}
	if sum, _, err := promote.HashDir(out); err != nil || sum != m.Adapter.SHA256 {
		t.Fatalf("a cancelled forced export changed %s: %v", out, err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Fatalf("%s holds %v, want the export alone", parent, ents)
	}
}

// TestTreeHash checks the documented hash against values computed with
// coreutils: in a directory holding adapter_config.json ('{"r":8}\n') and
// weights/x.bin ('abc'),
//
//	find . -type f ! -name grpo-checkpoint.json | sed 's|^\./||' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum
//
// prints a2d401e4….
func TestTreeHash(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte("{\"r\":8}\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "weights"), 0o755)
	os.WriteFile(filepath.Join(dir, "weights", "x.bin"), []byte("abc"), 0o644)
	os.WriteFile(filepath.Join(dir, promote.ManifestFile), []byte("{}"), 0o644) // not hashed
	sum, files, err := promote.HashDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sum, "a2d401e4858ef73be8f55587d761385c3d7e5d6cfd43b8333110b6b5d347d43d"; got != want {
		t.Fatalf("HashDir=%s, want %s", got, want)
	}
	want := []promote.FileHash{
		{Path: "adapter_config.json", Bytes: 8, SHA256: "17f1f1b60e9f4809fb946f0e7753f5f95a8d59c400b97327fc54b00da86159f6"},
		{Path: "weights/x.bin", Bytes: 3, SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	}
	if len(files) != 2 || files[0] != want[0] || files[1] != want[1] {
		t.Fatalf("files %+v, want %+v", files, want)
	}
}

// liveRefmodel serves the reference backend's inference API on loopback.
func liveRefmodel(t *testing.T) string { return serveRefmodel(t, nil) }

// serveRefmodel is liveRefmodel, strict (vLLM's quirks) when strict is set.
func serveRefmodel(t *testing.T, strict *refmodel.Strict) string {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Strict: strict})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.InferenceHandler())
	t.Cleanup(func() { srv.Close(); b.Close() })
	return srv.URL + "/v1"
}

func served(t *testing.T, url, name string) (string, bool) {
	t.Helper()
	models, err := inference.NewAdminClient(url, inference.AdminOptions{}).Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m.ID == name {
			return m.Root, true
		}
	}
	return "", false
}

func TestPromoteAgainstRefmodel(t *testing.T) {
	a, b := liveRefmodel(t), liveRefmodel(t)
	f := newFixture(t, a, b)
	ctx := context.Background()
	best := f.resolve(t, promote.Pick{By: "best"})
	clients, err := admins(best.Config, func(string) string { return "" }, inference.AdminOptions{})
	if err != nil || len(clients) != 2 {
		t.Fatalf("Endpoints: %d %v", len(clients), err)
	}
	// First promotion: loaded on both.
	res, err := promote.Promote(ctx, clients, promote.DefaultName("r1"), best)
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "r1-best" || res.Step != 1 || res.Adapter.Path != f.adapters[1] || len(res.Endpoints) != 2 {
		t.Fatalf("result %+v", res)
	}
	for i, url := range []string{a, b} {
		e := res.Endpoints[i]
		if e.URL != url || e.Action != promote.ActionLoaded || e.Before != "" || e.Served != f.adapters[1] {
			t.Fatalf("endpoint %d: %+v", i, e)
		}
		if root, ok := served(t, url, "r1-best"); !ok || root != f.adapters[1] {
			t.Fatalf("%s serves r1-best from %q (%v), want %s", url, root, ok, f.adapters[1])
		}
	}
	// Again with another step: replaced in place, the name stays served.
	res, err = promote.Promote(ctx, clients, "r1-best", f.resolve(t, promote.Pick{By: "last"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res.Endpoints {
		if e.Action != promote.ActionReplaced || e.Before != f.adapters[1] || e.Served != f.adapters[3] {
			t.Fatalf("second promotion, endpoint %d: %+v", i, e)
		}
	}
	if root, _ := served(t, a, "r1-best"); root != f.adapters[3] {
		t.Fatalf("after the second promotion r1-best is served from %s", root)
	}
	// The base model has nothing to load: nothing is sent.
	if _, err := promote.Promote(ctx, clients, "r1-best", f.resolve(t, promote.Pick{By: "base"})); !errors.Is(err, promote.ErrNoAdapter) || !strings.Contains(err.Error(), "base model") {
		t.Fatalf("base: %v", err)
	}
	if root, _ := served(t, a, "r1-best"); root != f.adapters[3] {
		t.Fatal("promoting the base changed the served adapter")
	}
	if _, err := promote.Promote(ctx, clients, "bad name", best); err == nil || !strings.Contains(err.Error(), "bad name") {
		t.Fatalf("bad name: %v", err)
	}
}

// noInplace is a vLLM-like server that ignores load_inplace, as older
// vLLM releases do: loading a served name answers 400 "already loaded".
//
// With silent set it answers 200 instead and keeps the old adapter.
type noInplace struct {
	silent  bool
	mu      sync.Mutex
	served  map[string]string
	unloads int
	auth    []string
}

func (s *noInplace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	body, _ := io.ReadAll(r.Body)
	var req inference.LoadAdapterRequest
	json.Unmarshal(body, &req)
	switch r.URL.Path {
	case "/v1/models":
		list := inference.ModelList{Object: "list", Data: []inference.Model{{ID: "base", Object: "model"}}}
		for n, p := range s.served {
			list.Data = append(list.Data, inference.Model{ID: n, Object: "model", Root: p})
		}
		json.NewEncoder(w).Encode(list)
	case "/v1/load_lora_adapter":
		if _, ok := s.served[req.LoraName]; ok && s.silent {
			io.WriteString(w, "Success")
			return
		}
		if _, ok := s.served[req.LoraName]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(inference.ErrorBody{Error: inference.ErrorDetail{Message: "The lora adapter '" + req.LoraName + "' has already been loaded.", Type: "BadRequestError", Code: 400}})
			return
		}
		s.served[req.LoraName] = req.LoraPath
		io.WriteString(w, "Success")
	case "/v1/unload_lora_adapter":
		delete(s.served, req.LoraName)
		s.unloads++
		io.WriteString(w, "Success")
	default:
		http.NotFound(w, r)
	}
}

// TestPromoteRefusesBaseModelName: promoting under the run's base model's
// name (a user's "clients call Qwen/Qwen3-14B") is refused before any
// request; the endpoint loaded an adapter under it, which shadows the base
// model for every client (the run's requests too) or is shadowed by it.
func TestPromoteRefusesBaseModelName(t *testing.T) {
	fake := &noInplace{served: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	f := newFixture(t, srv.URL+"/v1")
	best := f.resolve(t, promote.Pick{By: "best"})
	clients, err := admins(best.Config, func(string) string { return "" }, inference.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := promote.Promote(context.Background(), clients, "Qwen/Qwen3-14B", best)
	if !errors.Is(err, promote.ErrBaseModelName) || !strings.Contains(err.Error(), `name "Qwen/Qwen3-14B" is the base model's name`) || !strings.Contains(err.Error(), "choose another name") {
		t.Fatalf("Promote as the base model's name: %v, want ErrBaseModelName saying what to do", err)
	}
	if res.Endpoints != nil {
		t.Fatalf("Promote as the base model's name reported endpoints %+v", res.Endpoints)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.auth) != 0 || len(fake.served) != 0 {
		t.Fatalf("the endpoint was sent %d requests and serves %v, want none", len(fake.auth), fake.served)
	}
}

func TestPromoteFallsBackWithoutInplace(t *testing.T) {
	fake := &noInplace{served: map[string]string{"r1-best": "/old/adapter"}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	f := newFixture(t, srv.URL+"/v1")
	best := f.resolve(t, promote.Pick{By: "best"})
	clients, err := admins(best.Config, func(k string) string {
		if k == "TEST_KEY" {
			return "k3y"
		}
		return ""
	}, inference.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := promote.Promote(context.Background(), clients, "r1-best", best)
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Endpoints[0]; e.Action != promote.ActionReloaded || e.Before != "/old/adapter" || e.Served != f.adapters[1] {
		t.Fatalf("endpoint %+v", e)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.unloads != 1 || fake.served["r1-best"] != f.adapters[1] {
		t.Fatalf("unloads %d served %v", fake.unloads, fake.served)
	}
	for _, a := range fake.auth {
		if a != "Bearer k3y" {
			t.Fatalf("Authorization %q, want the key of api_key_env TEST_KEY", a)
		}
	}
}

// TestPromoteStrictRefmodel promotes twice into the reference backend in
// strict mode, which refuses load_inplace as vLLM before the option did.
func TestPromoteStrictRefmodel(t *testing.T) {
	url := serveRefmodel(t, &refmodel.Strict{})
	f := newFixture(t, url)
	clients, _ := admins(f.resolve(t, promote.Pick{By: "best"}).Config, func(string) string { return "" }, inference.AdminOptions{})
	for i, c := range []struct {
		pick   promote.Pick
		action string
		path   string
	}{{promote.Pick{By: "best"}, promote.ActionLoaded, f.adapters[1]}, {promote.Pick{By: "last"}, promote.ActionReloaded, f.adapters[3]}} {
		res, err := promote.Promote(context.Background(), clients, "r1-best", f.resolve(t, c.pick))
		if err != nil {
			t.Fatalf("promotion %d: %v", i+1, err)
		}
		if e := res.Endpoints[0]; e.Action != c.action || e.Served != c.path {
			t.Fatalf("promotion %d: %+v, want %s from %s", i+1, e, c.action, c.path)
		}
		if root, ok := served(t, url, "r1-best"); !ok || root != c.path {
			t.Fatalf("promotion %d: r1-best served from %q", i+1, root)
		}
	}
}

func TestPromoteFallsBackWhenInplaceIgnored(t *testing.T) {
	fake := &noInplace{silent: true, served: map[string]string{"r1-best": "/old/adapter"}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	f := newFixture(t, srv.URL+"/v1")
	best := f.resolve(t, promote.Pick{By: "best"})
	clients, _ := admins(best.Config, func(string) string { return "" }, inference.AdminOptions{})
	res, err := promote.Promote(context.Background(), clients, "r1-best", best)
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Endpoints[0]; e.Action != promote.ActionReloaded || e.Served != f.adapters[1] {
		t.Fatalf("endpoint %+v", e)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.unloads != 1 || fake.served["r1-best"] != f.adapters[1] {
		t.Fatalf("unloads %d served %v", fake.unloads, fake.served)
	}
}

func TestPromoteReportsFailedEndpoint(t *testing.T) {
	live := liveRefmodel(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/v1"
	down.Close() // nothing listens there now
	f := newFixture(t, live, downURL)
	best := f.resolve(t, promote.Pick{By: "best"})
	noRetry := httpx.DefaultPolicy()
	noRetry.Retries = 0
	clients, _ := admins(best.Config, func(string) string { return "" }, inference.AdminOptions{Retry: &noRetry})
	res, err := promote.Promote(context.Background(), clients, "r1-best", best)
	if err == nil || !strings.Contains(err.Error(), downURL) || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("err %v, want one naming %s", err, downURL)
	}
	if res.Endpoints[0].Action != promote.ActionLoaded || res.Endpoints[1].Action != promote.ActionFailed || res.Endpoints[1].Error == "" {
		t.Fatalf("endpoints %+v", res.Endpoints)
	}
}

func TestMarkOnDisk(t *testing.T) {
	f := newFixture(t)
	os.RemoveAll(f.adapters[2])
	run, steps, evals, err := f.store.Snapshot(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	v := checkpoint.NewRunView(run, steps, evals)
	promote.MarkOnDisk(&v)
	want := []*bool{nil, ptr(true), ptr(false), ptr(true)}
	for i, s := range v.Steps {
		if (s.AdapterOnDisk == nil) != (want[i] == nil) || (s.AdapterOnDisk != nil && *s.AdapterOnDisk != *want[i]) {
			t.Errorf("step %d: on disk %v, want %v", i, s.AdapterOnDisk, want[i])
		}
	}
}

func ptr(b bool) *bool { return &b }

// admins are admin clients of cfg's endpoints, each with the key in the
// variable its api_key_env names.
func admins(cfg config.Config, getenv func(string) string, opts inference.AdminOptions) ([]*inference.AdminClient, error) {
	var out []*inference.AdminClient
	for _, ep := range cfg.Inference.Endpoints {
		o := opts
		o.APIKey = getenv(ep.APIKeyEnv)
		out = append(out, inference.NewAdminClient(ep.URL, o))
	}
	return out, nil
}
