package refmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/grpo-dev/grpo/internal/fsutil"
)

// Files of an adapter directory, named as PEFT names them.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// AdapterJobFile, in an adapter directory a trainer job wrote, names the
// job that made it: {"job_id": ...}. The Python trainer (deploy/trainer)
// writes the same file; vLLM and PEFT ignore it.
const AdapterJobFile = "grpo_job.json"

// Tensor names inside WeightsFile.
const (
	tensorA = "base_model.model.policy.lora_A.weight"
	tensorB = "base_model.model.policy.lora_B.weight"
)

// MaxRank bounds an adapter's rank.
const MaxRank = 64

// Adapter is a LoRA adapter of the policy: logits = (W0 + Scale() B A) x.
// A is Rank x NumFeatures and B is NumOutputs x Rank, both row-major.
type Adapter struct {
	Rank          int
	Alpha         float64
	TargetModules []string
	BaseModel     string
	// BaseCoordination is the base strength (Base) the adapter was
	// trained on; only that base may serve or train it.
	BaseCoordination float64
	A                []float64
	B                []float64
}

// NewAdapter returns a fresh adapter: A drawn from PEFT's Kaiming-uniform
// init (uniform in ±1/sqrt(fan_in)) with the seeded generator, B zero, so
// that the policy starts as the base.
func NewAdapter(rank int, alpha float64, seed uint64) (*Adapter, error) {
	if rank < 1 || rank > MaxRank {
		return nil, fmt.Errorf("lora rank %d: accepted 1 to %d", rank, MaxRank)
	}
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("lora alpha %v: must be a positive number", alpha)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed_ada9_7e11))
	bound := 1 / math.Sqrt(NumFeatures)
	a := &Adapter{Rank: rank, Alpha: alpha, A: make([]float64, rank*NumFeatures), B: make([]float64, NumOutputs*rank)}
	for i := range a.A {
		a.A[i] = (2*rng.Float64() - 1) * bound
	}
	return a, nil
}

// Scale is alpha/rank, the factor of B A.
func (a *Adapter) Scale() float64 { return a.Alpha / float64(a.Rank) }

// Clone returns a deep copy.
func (a *Adapter) Clone() *Adapter {
	c := *a
	c.TargetModules = slices.Clone(a.TargetModules)
	c.A = slices.Clone(a.A)
	c.B = slices.Clone(a.B)
	return &c
}

// adapterConfig is ConfigFile: PEFT's fields, plus the policy's shape so a
// directory written for another feature layout is refused.
type adapterConfig struct {
	PEFTType      string   `json:"peft_type"`
	BaseModel     string   `json:"base_model_name_or_path"`
	Rank          int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	TargetModules []string `json:"target_modules"`
	Features      int      `json:"refmodel_features"`
	Outputs       int      `json:"refmodel_outputs"`
	// BaseCoordination is left out at the default base (0), so adapters
	// of the default base are written as before the knob existed.
	BaseCoordination float64 `json:"refmodel_base_coordination,omitempty"`
}

// Save writes the adapter to dir atomically: everything goes to a temporary
// directory next to dir, which then replaces dir, so a reader or a crash
// never sees a half-written adapter.
func (a *Adapter) Save(dir string) error { return a.save(dir, "", nil) }

// save is Save. With a job id it also writes AdapterJobFile naming the
// job, and replaces an adapter already at dir only when that job made it,
// or replaceable (nil: never) says the job that made it may lose it (an
// *adapterTakenError otherwise).
func (a *Adapter) save(dir, jobID string, replaceable func(owner string) bool) error {
	if err := a.validate(); err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)

	cfg, err := json.MarshalIndent(adapterConfig{
		PEFTType:      "LORA",
		BaseModel:     a.BaseModel,
		Rank:          a.Rank,
		Alpha:         a.Alpha,
		TargetModules: a.TargetModules,
		Features:      NumFeatures,
		Outputs:       NumOutputs,

		BaseCoordination: a.BaseCoordination,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	weights := encodeSafetensors([]tensor{
		{name: tensorA, shape: []int{a.Rank, NumFeatures}, data: a.A},
		{name: tensorB, shape: []int{NumOutputs, a.Rank}, data: a.B},
	})
	if err := fsutil.WriteFileSync(filepath.Join(tmp, ConfigFile), append(cfg, '\n')); err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	if err := fsutil.WriteFileSync(filepath.Join(tmp, WeightsFile), weights); err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	if jobID != "" {
		marker, err := json.Marshal(adapterJobRecord{JobID: jobID})
		if err != nil {
			return fmt.Errorf("save adapter %s: %w", dir, err)
		}
		if err := fsutil.WriteFileSync(filepath.Join(tmp, AdapterJobFile), append(marker, '\n')); err != nil {
			return fmt.Errorf("save adapter %s: %w", dir, err)
		}
		if owner, ok := adapterJob(dir); ok && owner != jobID && (replaceable == nil || !replaceable(owner)) {
			return &adapterTakenError{adapterTaken(filepath.Base(dir), owner, dir, "")}
		}
	}
	if err := replaceDir(tmp, dir); err != nil {
		return fmt.Errorf("save adapter %s: %w", dir, err)
	}
	return nil
}

// adapterJobRecord is AdapterJobFile.
type adapterJobRecord struct {
	JobID string `json:"job_id"`
}

// adapterJob returns the id of the job that made the adapter directory dir
// and true, or false when there is no such directory. The id is "" when
// dir does not say (AdapterJobFile missing or unreadable: not made by a
// trainer job, or made before the file was written).
func adapterJob(dir string) (string, bool) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	raw, err := os.ReadFile(filepath.Join(dir, AdapterJobFile))
	if err != nil {
		return "", true
	}
	var rec adapterJobRecord
	if json.Unmarshal(raw, &rec) != nil {
		return "", true
	}
	return rec.JobID, true
}

// adapterTakenError is a job's output_adapter that another job made, or
// is to make, or a directory no job is known to have made.
type adapterTakenError struct{ msg string }

func (e *adapterTakenError) Error() string { return e.msg }

// adapterTaken is the error text of a job whose output_adapter name is
// taken: job owner made it at path ("" when no job is known to have), or,
// in state (queued or running), is to make it. It says what the Python
// trainer (deploy/trainer, adapter_taken) says, quoted the Go way.
func adapterTaken(name, owner, path, state string) string {
	var whose string
	switch {
	case state != "":
		whose = fmt.Sprintf("job %q (%s) is to make it", owner, state)
	case owner != "":
		whose = fmt.Sprintf("job %q made it (%s)", owner, path)
	default:
		whose = path + " exists, made by no job this trainer has a record of"
	}
	fix := "give this job another output_adapter"
	if owner == "" {
		fix += ", or remove that directory"
	}
	return fmt.Sprintf("output_adapter %q is taken: %s; a job does not replace another job's adapter: %s", name, whose, fix)
}

// replaceDir renames src to dst. An existing dst is first moved aside and
// removed after the swap, so dst always names a complete directory. Another
// writer of the same dst (two servers re-running one job on a shared data
// dir) only makes the swap retry; the last complete directory wins.
func replaceDir(src, dst string) error {
	parent := filepath.Dir(dst)
	var aside []string
	defer func() {
		for _, d := range aside {
			os.RemoveAll(d)
		}
	}()
	for attempt := 0; ; attempt++ {
		err := os.Rename(src, dst)
		if err == nil {
			return fsutil.SyncDir(parent)
		}
		// EEXIST and ENOTEMPTY both match fs.ErrExist.
		if !errors.Is(err, fs.ErrExist) || attempt == 8 {
			return err
		}
		old := filepath.Join(parent, fmt.Sprintf(".old-%s-%016x", filepath.Base(dst), rand.Uint64()))
		switch err := os.Rename(dst, old); {
		case err == nil:
			aside = append(aside, old)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
}

// LoadAdapter reads an adapter directory written by Save.
func LoadAdapter(dir string) (*Adapter, error) {
	a, err := loadAdapter(dir)
	if err != nil {
		return nil, fmt.Errorf("load adapter %s: %w", dir, err)
	}
	return a, nil
}

func loadAdapter(dir string) (*Adapter, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	var cfg adapterConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	switch {
	case cfg.PEFTType != "LORA":
		return nil, fmt.Errorf("%s: peft_type %q, want \"LORA\"", ConfigFile, cfg.PEFTType)
	case cfg.Features != NumFeatures || cfg.Outputs != NumOutputs:
		return nil, fmt.Errorf("%s: written for %d features and %d outputs, this policy has %d and %d",
			ConfigFile, cfg.Features, cfg.Outputs, NumFeatures, NumOutputs)
	}
	raw, err = os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		return nil, err
	}
	tensors, err := decodeSafetensors(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", WeightsFile, err)
	}
	a := &Adapter{
		Rank:          cfg.Rank,
		Alpha:         cfg.Alpha,
		TargetModules: cfg.TargetModules,
		BaseModel:     cfg.BaseModel,

		BaseCoordination: cfg.BaseCoordination,
	}
	if a.A, err = tensorOfShape(tensors, tensorA, cfg.Rank, NumFeatures); err != nil {
		return nil, fmt.Errorf("%s: %w", WeightsFile, err)
	}
	if a.B, err = tensorOfShape(tensors, tensorB, NumOutputs, cfg.Rank); err != nil {
		return nil, fmt.Errorf("%s: %w", WeightsFile, err)
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return a, nil
}

func tensorOfShape(ts map[string]tensor, name string, rows, cols int) ([]float64, error) {
	t, ok := ts[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	if len(t.shape) != 2 || t.shape[0] != rows || t.shape[1] != cols {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d %d]", name, t.shape, rows, cols)
	}
	return t.data, nil
}

func (a *Adapter) validate() error {
	switch {
	case a.Rank < 1 || a.Rank > MaxRank:
		return fmt.Errorf("rank %d: accepted 1 to %d", a.Rank, MaxRank)
	case !(a.Alpha > 0) || math.IsInf(a.Alpha, 0):
		return fmt.Errorf("lora_alpha %v: must be a positive number", a.Alpha)
	case len(a.A) != a.Rank*NumFeatures || len(a.B) != NumOutputs*a.Rank:
		return errors.New("weights do not match the rank")
	}
	for _, v := range a.A {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("lora_A has a non-finite weight")
		}
	}
	for _, v := range a.B {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("lora_B has a non-finite weight")
		}
	}
	return nil
}

// DefaultRank is the rank of a fresh adapter when a job does not set one.
const DefaultRank = 8
