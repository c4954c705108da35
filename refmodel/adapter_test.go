package refmodel

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSafetensorsLayout checks the byte layout against one worked by hand.
func TestSafetensorsLayout(t *testing.T) {
	got := encodeSafetensors([]tensor{{name: "t", shape: []int{1, 1}, data: []float64{1}}})
	header := `{"__metadata__":{"format":"pt"},"t":{"dtype":"F64","shape":[1,1],"data_offsets":[0,8]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	want = append(want, header...)
	want = append(want, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f) // 1.0 as little-endian float64
	if !bytes.Equal(got, want) {
		t.Fatalf("encodeSafetensors=\n%q\nwant\n%q", got, want)
	}
	ts, err := decodeSafetensors(got)
	if err != nil {
		t.Fatal(err)
	}
	if tt := ts["t"]; !slices.Equal(tt.data, []float64{1}) || !slices.Equal(tt.shape, []int{1, 1}) {
		t.Fatalf("decoded %+v", tt)
	}
}

func TestAdapterSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "adapters", "run-step-0001")
	a, err := NewAdapter(4, 8, 42)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.B {
		a.B[i] = float64(i) / 7
	}
	a.TargetModules = []string{"q_proj", "v_proj"}
	a.BaseModel = "Qwen/Qwen3-14B"
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != 4 || got.Alpha != 8 || !slices.Equal(got.A, a.A) || !slices.Equal(got.B, a.B) ||
		!slices.Equal(got.TargetModules, a.TargetModules) || got.BaseModel != a.BaseModel {
		t.Fatalf("round trip: got %+v, want %+v", got, a)
	}

	// Saving again replaces the directory and leaves no temporaries.
	a.B[0] = 99
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err = LoadAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.B[0] != 99 {
		t.Fatalf("after a second save B[0]=%v, want 99", got.B[0])
	}
	ents, _ := os.ReadDir(filepath.Dir(dir))
	if len(ents) != 1 || ents[0].Name() != "run-step-0001" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("adapters dir holds %v, want only run-step-0001", names)
	}
}

func TestLoadAdapterErrors(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good")
	a, _ := NewAdapter(2, 4, 1)
	if err := a.Save(good); err != nil {
		t.Fatal(err)
	}
	weights, _ := os.ReadFile(filepath.Join(good, WeightsFile))
	config, _ := os.ReadFile(filepath.Join(good, ConfigFile))

	for _, tc := range []struct {
		name    string
		config  string
		weights []byte
		want    string
	}{
		{"missing dir", "", nil, "no such file"},
		{"truncated weights", string(config), weights[:len(weights)-8], WeightsFile},
		{"garbage weights", string(config), []byte("not a tensor file"), WeightsFile},
		{"bad config json", "{", weights, ConfigFile},
		{"other feature layout", strings.Replace(string(config), `"refmodel_features": 20`, `"refmodel_features": 19`, 1), weights, "features"},
		{"rank mismatch", strings.Replace(string(config), `"r": 2`, `"r": 3`, 1), weights, "shape"},
		{"not lora", strings.Replace(string(config), `"LORA"`, `"IA3"`, 1), weights, "peft_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a")
			if tc.config != "" {
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, ConfigFile), []byte(tc.config), 0o644)
				os.WriteFile(filepath.Join(dir, WeightsFile), tc.weights, 0o644)
			}
			_, err := LoadAdapter(dir)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want it to name %s and mention %q", err, dir, tc.want)
			}
		})
	}
}

// TestAdapterConcurrentSaves: two writers of one adapter directory (two
// servers re-running the same job) both succeed and leave a complete one.
func TestAdapterConcurrentSaves(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "same")
	a, _ := NewAdapter(4, 8, 1)
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- a.Save(dir) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := LoadAdapter(dir)
	if err != nil || !slices.Equal(got.A, a.A) {
		t.Fatalf("after concurrent saves: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 1 {
		t.Fatalf("%d entries left next to the adapter, want 1", len(ents))
	}
}
