package refmodel

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/inference"
)

func TestLoadStored(t *testing.T) {
	dir := t.TempDir()
	adapters := filepath.Join(dir, "adapters")
	save := func(name string, b0 float64) string {
		a, err := NewAdapter(2, 4, 1)
		if err != nil {
			t.Fatal(err)
		}
		a.B[0] = b0
		p := filepath.Join(adapters, filepath.FromSlash(name))
		if err := a.Save(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1 := save("run-step-0001", 1)
	p2 := save("exp/arm/1-step-0002", 2) // a run name with slashes nests directories
	// A save in progress is skipped.
	os.MkdirAll(filepath.Join(adapters, ".tmp-run-step-0003-x"), 0o755)

	b := mustOpen(t, dir, 1)
	names, err := b.LoadStored()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"exp/arm/1-step-0002", "run-step-0001"}; !slices.Equal(names, want) {
		t.Fatalf("LoadStored=%v, want %v", names, want)
	}
	srv := httptest.NewServer(b.InferenceHandler())
	defer srv.Close()
	code, body := do(t, http.MethodGet, srv.URL+"/v1/models", nil)
	var list inference.ModelList
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("models: %d %s", code, body)
	}
	roots := map[string]string{}
	for _, m := range list.Data {
		roots[m.ID] = m.Root
	}
	if roots["run-step-0001"] != p1 || roots["exp/arm/1-step-0002"] != p2 || len(roots) != 3 {
		t.Fatalf("served %v", roots)
	}
	// Loaded adapters are the saved weights: the two differ from the base.
	if got := b.models.get("run-step-0001").policy; got == nil || b.models.get("exp/arm/1-step-0002").policy == got {
		t.Fatal("adapters not loaded as distinct policies")
	}
	// Again: nothing new, nothing replaced.
	if names, err := b.LoadStored(); err != nil || len(names) != 0 {
		t.Fatalf("second LoadStored=%v %v", names, err)
	}

	// A broken adapter directory is an error naming it.
	bad := filepath.Join(adapters, "broken")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, ConfigFile), []byte("{"), 0o644)
	if _, err := mustOpen(t, dir, 1).LoadStored(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("broken adapter: %v", err)
	}
	// No adapters directory at all: nothing to load.
	if names, err := mustOpen(t, filepath.Join(t.TempDir(), "fresh"), 1).LoadStored(); err != nil || len(names) != 0 {
		t.Fatalf("empty data dir: %v %v", names, err)
	}
}
