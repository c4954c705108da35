package inference

import (
	"slices"
	"testing"
)

func TestAdapterKeeper_Prune(t *testing.T) {
	for _, tt := range []struct {
		name    string
		keep    int
		tracked []string
		best    string
		want    []string
	}{
		{"nothing loaded", 2, nil, "", nil},
		{"within keep", 2, []string{"s1", "s2"}, "", nil},
		{"best among old", 2, []string{"s1", "s2", "s3", "s4"}, "s2", []string{"s1"}},
		{"best among recent", 2, []string{"s1", "s2", "s3", "s4"}, "s4", []string{"s1", "s2"}},
		{"no best yet", 2, []string{"s1", "s2", "s3", "s4"}, "", []string{"s1", "s2"}},
		{"best is the base model", 1, []string{"s1", "s2", "s3"}, "Qwen/Qwen3-14B", []string{"s1", "s2"}},
		{"keep 0 keeps best only", 0, []string{"s1", "s2", "s3"}, "s2", []string{"s1", "s3"}},
		{"negative keep is 0", -1, []string{"s1", "s2"}, "", []string{"s1", "s2"}},
		{"keep more than loaded", 5, []string{"s1", "s2", "s3"}, "s1", nil},
		{"reload moves to recent", 1, []string{"s1", "s2", "s1"}, "", []string{"s2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &AdapterKeeper{Keep: tt.keep}
			for _, name := range tt.tracked {
				k.Track(name)
			}
			before := slices.Clone(k.loaded)
			if got := k.Prune(tt.best); !slices.Equal(got, tt.want) {
				t.Fatalf("Prune(%q)=%v, want %v", tt.best, got, tt.want)
			}
			if got := slices.Clone(k.loaded); !slices.Equal(got, before) {
				t.Fatalf("Prune changed the tracked set: %v, was %v", got, before)
			}
		})
	}
}

func TestAdapterKeeper_Untrack(t *testing.T) {
	k := &AdapterKeeper{Keep: 1}
	for _, name := range []string{"s1", "s2", "s3"} {
		k.Track(name)
	}
	k.Untrack(k.Prune("s1")...)
	if got, want := slices.Clone(k.loaded), []string{"s1", "s3"}; !slices.Equal(got, want) {
		t.Fatalf("loaded=%v, want %v", got, want)
	}
	k.Track("s4")
	if got, want := k.Prune("s4"), []string{"s1", "s3"}; !slices.Equal(got, want) {
		t.Fatalf("Prune(s4)=%v, want %v", got, want)
	}
}
