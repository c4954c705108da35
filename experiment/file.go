// Package experiment reads experiment files (DESIGN §11): arms x seeds of
// runs in one store, each arm a config deep-merged over a shared base,
// measured on one test split; and turns the runs' stored results into the
// experiment's summary and report.
package experiment

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/run"
)

// File is an experiment file, resolved.
type File struct {
	Name  string
	Seeds []int64
	DB    string // default <name>.db beside the file
	Out   string // default <name>/ beside the file
	Arms  []Arm
	Test  Test
	base  *yaml.Node
}

// Arm is one treatment: Set is deep-merged over the base config.
type Arm struct {
	Name string
	set  *yaml.Node
}

// Test is the split every run's checkpoints are measured on, and which
// checkpoints: base, best, last. N is the file's test.n, or when it lists
// none every size an arm trains at.
type Test struct {
	N        []int
	Episodes int
	Seed     int64
	Steps    []string
}

// StepKinds are the checkpoints an experiment can measure.
var StepKinds = []string{"base", "best", "last"}

type fileDoc struct {
	Experiment struct {
		Name  string  `yaml:"name"`
		Seeds []int64 `yaml:"seeds"`
		DB    string  `yaml:"db"`
		Out   string  `yaml:"out"`
	} `yaml:"experiment"`
	Base yaml.Node `yaml:"base"`
	Arms []struct {
		Name string    `yaml:"name"`
		Set  yaml.Node `yaml:"set"`
	} `yaml:"arms"`
	Test *struct {
		N        []int    `yaml:"n"`
		Episodes int      `yaml:"episodes"`
		Seed     *int64   `yaml:"seed"`
		Steps    []string `yaml:"steps"`
	} `yaml:"test"`
}

// Load reads and checks the experiment file at path, and checks that every
// arm's config is valid. Relative db and out paths are beside the file.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read experiment file: %w", err)
	}
	var doc fileDoc
	if err := config.Decode(data, &doc); err != nil {
		return nil, fmt.Errorf("experiment file %s: %v (want experiment: {name, seeds, db, out}, base, arms: [{name, set}], test)", path, err)
	}
	e := doc.Experiment
	if e.Name == "" || checkpoint.ValidateRunName(e.Name+"/a/1") != nil || slices.Contains([]byte(e.Name), '/') {
		return nil, fmt.Errorf("experiment file %s: experiment.name %q: want a name of A-Z a-z 0-9 . _ -, starting with a letter or digit (runs are named <name>/<arm>/<seed>)", path, e.Name)
	}
	if len(e.Seeds) == 0 {
		return nil, fmt.Errorf("experiment file %s: experiment.seeds is empty; list the run.seed of each replicate, e.g. [1, 2, 3, 4, 5]", path)
	}
	for i, s := range e.Seeds {
		if slices.Index(e.Seeds, s) != i {
			return nil, fmt.Errorf("experiment file %s: experiment.seeds lists %d twice", path, s)
		}
	}
	dir := filepath.Dir(path)
	f := &File{Name: e.Name, Seeds: e.Seeds, DB: e.DB, Out: e.Out, base: &doc.Base}
	if f.DB == "" {
		f.DB = e.Name + ".db"
	}
	if f.Out == "" {
		f.Out = e.Name
	}
	if !filepath.IsAbs(f.DB) {
		f.DB = filepath.Join(dir, f.DB)
	}
	if !filepath.IsAbs(f.Out) {
		f.Out = filepath.Join(dir, f.Out)
	}
	if len(doc.Arms) == 0 {
		return nil, fmt.Errorf("experiment file %s: arms is empty; give at least one {name, set}", path)
	}
	for i, a := range doc.Arms {
		if a.Name == "" || checkpoint.ValidateRunName(e.Name+"/"+a.Name+"/1") != nil || slices.Contains([]byte(a.Name), '/') {
			return nil, fmt.Errorf("experiment file %s: arms[%d].name %q: want a name of A-Z a-z 0-9 . _ -, starting with a letter or digit", path, i, a.Name)
		}
		for _, b := range f.Arms {
			if b.Name == a.Name {
				return nil, fmt.Errorf("experiment file %s: two arms are named %s", path, a.Name)
			}
		}
		set := a.Set
		f.Arms = append(f.Arms, Arm{Name: a.Name, set: &set})
	}
	def := config.Default().Test
	f.Test = Test{Episodes: def.Episodes, Seed: def.Seed, Steps: StepKinds}
	if t := doc.Test; t != nil {
		if len(t.N) > 0 {
			f.Test.N = t.N
		}
		if t.Episodes != 0 {
			f.Test.Episodes = t.Episodes
		}
		if t.Seed != nil {
			f.Test.Seed = *t.Seed
		}
		if len(t.Steps) > 0 {
			f.Test.Steps = t.Steps
		}
	}
	for _, s := range f.Test.Steps {
		if !slices.Contains(StepKinds, s) {
			return nil, fmt.Errorf("experiment file %s: test.steps: %q is not one of base, best, last", path, s)
		}
	}
	// Without test.n every arm is measured at the sizes any arm trains
	// at (each arm's config.Config.TestSizes), so that arms compare at
	// each of them.
	var sizes []int
	for _, a := range f.Arms {
		cfg, err := f.Config(a.Name, f.Seeds[0])
		if err != nil {
			return nil, fmt.Errorf("experiment file %s: %w", path, err)
		}
		for _, n := range cfg.TestSizes() {
			if !slices.Contains(sizes, n) {
				sizes = append(sizes, n)
			}
		}
	}
	if len(f.Test.N) == 0 {
		f.Test.N = sizes
	}
	return f, nil
}

// RunName is the name of arm's run with seed: <experiment>/<arm>/<seed>.
func (f *File) RunName(arm string, seed int64) string {
	return f.Name + "/" + arm + "/" + strconv.FormatInt(seed, 10)
}

// hasKey reports whether the YAML mapping n (or the document holding it)
// has the key path.
func hasKey(n *yaml.Node, path ...string) bool {
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if len(path) == 0 {
		return true
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == path[0] {
			return hasKey(n.Content[i+1], path[1:]...)
		}
	}
	return false
}

// Config is the run config of arm with seed: the base, the arm's set
// merged over it, run.name, run.seed and run.db set, and the test section
// the experiment's. It is validated.
func (f *File) Config(arm string, seed int64) (config.Config, error) {
	i := slices.IndexFunc(f.Arms, func(a Arm) bool { return a.Name == arm })
	if i < 0 {
		return config.Config{}, fmt.Errorf("no arm %s", arm)
	}
	doc := merge(clone(f.base), f.Arms[i].set)
	// The experiment sets these itself in every run: a base or arm that
	// sets them would be silently overridden.
	for _, key := range [][]string{{"run", "name"}, {"run", "seed"}, {"run", "db"}, {"test"}} {
		if hasKey(doc, key...) {
			return config.Config{}, fmt.Errorf("arm %s: %s is set by the experiment itself (run names <experiment>/<arm>/<seed>, experiment.seeds, experiment.db, the file's own test section): remove it from base and the arm's set",
				arm, strings.Join(key, "."))
		}
	}
	var data []byte
	if doc != nil && doc.Kind != 0 {
		var err error
		if data, err = yaml.Marshal(doc); err != nil {
			return config.Config{}, fmt.Errorf("arm %s: %w", arm, err)
		}
	}
	cfg, err := config.Parse(data, config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		return config.Config{}, fmt.Errorf("arm %s (base with its set merged over): %w", arm, err)
	}
	cfg.Run.Name, cfg.Run.Seed, cfg.Run.DB = f.RunName(arm, seed), seed, f.DB
	cfg.Test = config.Test{N: f.Test.N, Episodes: f.Test.Episodes, Seed: f.Test.Seed}
	if err := cfg.Validate(); err != nil {
		return config.Config{}, fmt.Errorf("arm %s, seed %d: %w", arm, seed, err)
	}
	return cfg, nil
}

func clone(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = clone(x)
	}
	return &c
}

// merge deep-merges mapping src over dst: keys of src replace those of
// dst, except that two mappings are merged key by key.
func merge(dst, src *yaml.Node) *yaml.Node {
	if src == nil || src.Kind == 0 {
		return dst
	}
	if dst == nil || dst.Kind == 0 {
		return clone(src)
	}
	if dst.Kind == yaml.DocumentNode && len(dst.Content) == 1 {
		dst.Content[0] = merge(dst.Content[0], src)
		return dst
	}
	if src.Kind == yaml.DocumentNode && len(src.Content) == 1 {
		return merge(dst, src.Content[0])
	}
	if dst.Kind != yaml.MappingNode || src.Kind != yaml.MappingNode {
		return clone(src)
	}
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		found := false
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k.Value {
				dst.Content[j+1] = merge(dst.Content[j+1], v)
				found = true
				break
			}
		}
		if !found {
			dst.Content = append(dst.Content, clone(k), clone(v))
		}
	}
	return dst
}
