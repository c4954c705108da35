package refmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/internal/fsutil"
	"github.com/grpo-dev/grpo/trainer"
)

// Job record files, one directory per job under the jobs directory.
const (
	jobFile     = "job.json"     // the job's state, rewritten on each transition
	requestFile = "request.json" // the create body, written once
)

// ErrJobNotFound is returned for an unknown job id.
var ErrJobNotFound = errors.New("job not found")

// jobRecord is jobFile.
type jobRecord struct {
	Job     trainer.Job `json:"job"`
	Created time.Time   `json:"created"`
	Updated time.Time   `json:"updated"`
}

// jobEntry is a job the manager knows.
type jobEntry struct {
	job       trainer.Job
	req       *trainer.JobRequest // dropped once the job is terminal
	created   time.Time
	cancelled bool               // by DELETE
	cancel    context.CancelFunc // set while training
}

// jobManager runs trainer jobs one at a time, in the order they arrive, and
// records each in its own directory so a restarted server answers for
// finished jobs and re-runs unfinished ones (training is deterministic, so
// the result is the same).
type jobManager struct {
	dir        string
	adapterDir func(name string) string
	seed       uint64
	base       *Base
	logger     *slog.Logger

	mu    sync.Mutex
	jobs  map[string]*jobEntry
	queue []*jobEntry
	wake  chan struct{}
}

func newJobManager(dir string, adapterDir func(string) string, seed uint64, base *Base, logger *slog.Logger) *jobManager {
	return &jobManager{
		dir:        dir,
		adapterDir: adapterDir,
		seed:       seed,
		base:       base,
		logger:     logger,
		jobs:       make(map[string]*jobEntry),
		wake:       make(chan struct{}, 1),
	}
}

// jobDir is job id's record directory: the id escaped as one path
// segment, with a leading dot escaped too ("." and ".." would name the
// jobs directory or its parent).
func (m *jobManager) jobDir(id string) string {
	return filepath.Join(m.dir, jobDirName(id))
}

// maxJobDirName is the longest name of a job's record directory: most
// file systems take 255 bytes.
const maxJobDirName = 255

// jobDirName is the name of job id's record directory (jobDir).
func jobDirName(id string) string {
	name := url.PathEscape(id)
	if strings.HasPrefix(name, ".") {
		name = "%2E" + name[1:]
	}
	return name
}

// errParentOutside is the error of a parent adapter path outside the
// trainer's adapter directory. It is the same whether the path exists or
// not, so that a client learns nothing of the trainer's file system.
var errParentOutside = errors.New("parent_adapter.path: not an adapter of this trainer (parent adapters are read only from its own adapter directory)")

// parentPath is path, a parent adapter's, when it lies in the trainer's
// adapter directory, through symbolic links too; else errParentOutside.
func (m *jobManager) parentPath(path string) (string, error) {
	root, err := filepath.Abs(filepath.Dir(m.adapterDir("x")))
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(path) || !inside(filepath.Clean(path), root) {
		return "", errParentOutside
	}
	// A link inside may point outside: judge where it leads. A path that
	// does not resolve is inside and fails to load, naming only itself.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		realRoot, rerr := filepath.EvalSymlinks(root)
		if rerr != nil || !inside(real, realRoot) {
			return "", errParentOutside
		}
	}
	return path, nil
}

// inside reports whether path lies strictly inside dir.
func inside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// open creates the directories and reloads the records.
func (m *jobManager) open() error {
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.adapterDir("x")), 0o755); err != nil {
		return err
	}
	// An adapter saved when the process was killed left its temporary
	// directory: no job can finish it now.
	removeTemporaries(filepath.Dir(m.adapterDir("x")))
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ents {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(m.dir, d.Name())
		raw, err := os.ReadFile(filepath.Join(dir, jobFile))
		if errors.Is(err, os.ErrNotExist) {
			// A create that failed before its record was complete:
			// removed when it holds nothing a create does not write and
			// is not being written now. Anything else is not this
			// trainer's, and left alone.
			switch {
			case !halfCreated(dir):
				m.logger.Warn("not a trainer job directory (no job record); left alone", "dir", dir)
			case abandoned(dir):
				os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("read job record %s: %w", dir, err)
		}
		removeTemporaries(dir)
		var rec jobRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("read job record %s: %w", dir, err)
		}
		e := &jobEntry{job: rec.Job, created: rec.Created}
		m.jobs[e.job.ID] = e
		if trainer.Terminal(e.job.State) {
			continue
		}
		req, err := readRequest(filepath.Join(dir, requestFile))
		if err != nil {
			e.job.State, e.job.Error = trainer.StateFailed, "job request record unreadable after restart: "+err.Error()
			if err := m.persist(e); err != nil {
				return err
			}
			continue
		}
		e.req = req
		e.job.State, e.job.Progress = trainer.StateQueued, 0
		m.queue = append(m.queue, e)
	}
	sort.SliceStable(m.queue, func(i, j int) bool { return m.queue[i].created.Before(m.queue[j].created) })
	if len(m.queue) > 0 {
		m.logger.Info("re-running unfinished trainer jobs", "count", len(m.queue))
		m.signal()
	}
	return nil
}

// abandonedAfter is how old a temporary entry, or a job directory
// without its record, must be to be taken for a killed process's: another
// process sharing the data directory (two grpo runs on one store) may be
// writing a younger one.
const abandonedAfter = 10 * time.Minute

// abandoned reports whether the entry at path was last changed over
// abandonedAfter ago.
func abandoned(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && time.Since(fi.ModTime()) > abandonedAfter
}

// removeTemporaries removes dir's abandoned entries named .tmp-* (files
// written atomically, directories of adapters being saved) left by a
// killed process.
func removeTemporaries(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if p := filepath.Join(dir, e.Name()); strings.HasPrefix(e.Name(), ".tmp-") && abandoned(p) {
			os.RemoveAll(p)
		}
	}
}

// halfCreated reports whether dir holds only what a create writes before
// the job's record: the request and temporary files.
func halfCreated(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() != requestFile && !strings.HasPrefix(e.Name(), ".tmp-") {
			return false
		}
	}
	return true
}

func readRequest(path string) (*trainer.JobRequest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var req trainer.JobRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// persist writes e's record. Callers hold m.mu.
func (m *jobManager) persist(e *jobEntry) error {
	b, err := json.Marshal(jobRecord{Job: e.job, Created: e.created, Updated: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(m.jobDir(e.job.ID), jobFile), b); err != nil {
		return fmt.Errorf("record job %s: %w", e.job.ID, err)
	}
	return nil
}

func (m *jobManager) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// create records and queues a job. An id already known returns the existing
// job and false: the same id never trains twice. A job whose
// output_adapter another job made or is to make is refused with an
// *adapterTakenError.
func (m *jobManager) create(req *trainer.JobRequest, body []byte) (trainer.Job, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.jobs[req.ID]; ok {
		return e.job, false, nil
	}
	if msg := m.adapterTaken(req); msg != "" {
		return trainer.Job{}, false, &adapterTakenError{msg}
	}
	e := &jobEntry{
		job:     trainer.Job{ID: req.ID, State: trainer.StateQueued},
		req:     req,
		created: time.Now().UTC(),
	}
	dir := m.jobDir(req.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return trainer.Job{}, false, fmt.Errorf("record job %s: %w", req.ID, err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, requestFile), body); err != nil {
		os.RemoveAll(dir)
		return trainer.Job{}, false, fmt.Errorf("record job %s: %w", req.ID, err)
	}
	if err := m.persist(e); err != nil {
		os.RemoveAll(dir)
		return trainer.Job{}, false, err
	}
	m.jobs[req.ID] = e
	m.queue = append(m.queue, e)
	m.signal()
	m.logger.Info("trainer job queued", "id", req.ID, "output_adapter", req.OutputAdapter, "trajectories", len(req.Trajectories))
	return e.job, true, nil
}

// adapterTaken says why req may not have its output_adapter, or "": a
// queued or running job is to make it (of several, the latest created is
// named), or another job made it. The job named as its maker is the one
// the adapter's AdapterJobFile names, which made what is there now (the
// records may name others that held the name before); without that file
// (a directory written before the file existed, or no directory), the
// latest created succeeded job whose adapter has the name; failing that,
// an existing directory is no known job's. The adapter of a job that
// ended cancelled or failed (replaceable) is free: such a job can leave
// its adapter written (saved, then failed), and no answer of the trainer
// points at it. Callers hold m.mu; req.ID is not a known job.
func (m *jobManager) adapterTaken(req *trainer.JobRequest) string {
	name := req.OutputAdapter
	var toMake, made *jobEntry
	for _, e := range m.jobs {
		switch {
		case (e.job.State == trainer.StateQueued || e.job.State == trainer.StateRunning) && e.req != nil && e.req.OutputAdapter == name:
			if toMake == nil || e.created.After(toMake.created) {
				toMake = e
			}
		case e.job.State == trainer.StateSucceeded && e.job.Adapter != nil && e.job.Adapter.Name == name:
			if made == nil || e.created.After(made.created) {
				made = e
			}
		}
	}
	if toMake != nil {
		return adapterTaken(name, toMake.job.ID, "", toMake.job.State)
	}
	dir := m.adapterDir(name)
	owner, exists := adapterJob(dir)
	switch {
	case owner != "":
		if owner == req.ID || m.replaceable(owner) {
			return ""
		}
		return adapterTaken(name, owner, dir, "")
	case made != nil:
		return adapterTaken(name, made.job.ID, made.job.Adapter.Path, "")
	case exists:
		return adapterTaken(name, "", dir, "")
	}
	return ""
}

// replaceable reports whether the adapter job id made may be replaced by
// another job: its record says it ended cancelled or failed. Callers hold
// m.mu.
func (m *jobManager) replaceable(id string) bool {
	e, ok := m.jobs[id]
	return ok && (e.job.State == trainer.StateCancelled || e.job.State == trainer.StateFailed)
}

// get returns a job's current state.
func (m *jobManager) get(id string) (trainer.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.jobs[id]
	if !ok {
		return trainer.Job{}, ErrJobNotFound
	}
	return e.job, nil
}

// cancelJob cancels a queued or running job; a finished job is left as it
// is.
func (m *jobManager) cancelJob(id string) (trainer.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.jobs[id]
	if !ok {
		return trainer.Job{}, ErrJobNotFound
	}
	if trainer.Terminal(e.job.State) {
		return e.job, nil
	}
	e.cancelled = true
	e.job.State = trainer.StateCancelled
	if e.cancel != nil {
		e.cancel()
	}
	m.logger.Info("trainer job cancelled", "id", id)
	return e.job, m.persist(e)
}

// run trains queued jobs until ctx is done.
func (m *jobManager) run(ctx context.Context) {
	for ctx.Err() == nil {
		e, req, jctx, cancel := m.next(ctx)
		if e == nil {
			select {
			case <-ctx.Done():
				return
			case <-m.wake:
				continue
			}
		}
		m.execute(ctx, jctx, e, req)
		cancel()
	}
}

// next pops the first job still queued and marks it running.
func (m *jobManager) next(ctx context.Context) (*jobEntry, *trainer.JobRequest, context.Context, context.CancelFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.queue) > 0 {
		e := m.queue[0]
		m.queue = m.queue[1:]
		if e.cancelled || e.job.State != trainer.StateQueued {
			e.req = nil
			continue
		}
		jctx, cancel := context.WithCancel(ctx)
		e.cancel = cancel
		e.job.State, e.job.Progress = trainer.StateRunning, 0
		if err := m.persist(e); err != nil {
			m.logger.Warn("trainer job record not updated", "id", e.job.ID, "err", err)
		}
		return e, e.req, jctx, cancel
	}
	return nil, nil, nil, func() {}
}

// execute trains one job and records the outcome. When ctx (the server) is
// done first the job is left unfinished, to run again after a restart.
func (m *jobManager) execute(ctx, jctx context.Context, e *jobEntry, req *trainer.JobRequest) {
	start := time.Now()
	ad, stats, err := m.train(jctx, e, req)

	m.mu.Lock()
	defer m.mu.Unlock()
	e.cancel = nil
	switch {
	case e.cancelled:
		e.req = nil
		return
	case err != nil && ctx.Err() != nil:
		m.logger.Info("trainer job interrupted by shutdown", "id", e.job.ID)
		return
	case err != nil:
		e.job.State, e.job.Error = trainer.StateFailed, err.Error()
	default:
		dir := m.adapterDir(req.OutputAdapter)
		switch owner, ok := adapterJob(dir); {
		case ok && owner == e.job.ID:
			m.logger.Info("replacing the adapter an earlier run of this job made", "id", e.job.ID, "dir", dir)
		case ok && m.replaceable(owner):
			m.logger.Info("replacing the adapter of a job that ended cancelled or failed", "id", e.job.ID, "dir", dir,
				"made_by", owner, "made_by_state", m.jobs[owner].job.State)
		}
		if err := ad.save(dir, e.job.ID, m.replaceable); err != nil {
			e.job.State, e.job.Error = trainer.StateFailed, err.Error()
			break
		}
		e.job.State, e.job.Progress = trainer.StateSucceeded, 1
		e.job.Adapter = &trainer.Adapter{Name: req.OutputAdapter, Path: dir}
		e.job.Metrics = &trainer.Metrics{
			Loss: stats.Loss, KL: stats.KL, GradNorm: stats.GradNorm, ClipFraction: stats.ClipFraction,
		}
		// The diagnostics of a job that trained on something; no
		// optimizer_step: plain gradient descent keeps no optimizer state.
		if stats.Samples > 0 {
			e.job.Metrics.SamplerLogprobGap, e.job.Metrics.Entropy, e.job.Metrics.UpdateNorm = &stats.SamplerLogprobGap, &stats.Entropy, &stats.UpdateNorm
		}
	}
	e.req = nil
	if err := m.persist(e); err != nil {
		m.logger.Warn("trainer job record not updated", "id", e.job.ID, "err", err)
	}
	m.logger.Info("trainer job finished", "id", e.job.ID, "state", e.job.State, "error", e.job.Error,
		"seconds", time.Since(start).Seconds())
}

// train runs the update of a job: its parent (or a fresh adapter), its
// samples, PPO-clip.
func (m *jobManager) train(ctx context.Context, e *jobEntry, req *trainer.JobRequest) (*Adapter, TrainStats, error) {
	init, err := m.initialAdapter(req)
	if err != nil {
		return nil, TrainStats{}, err
	}
	samples, err := SamplesOf(req.Trajectories)
	if err != nil {
		return nil, TrainStats{}, err
	}
	progress := func(f float64) {
		m.mu.Lock()
		if !e.cancelled {
			e.job.Progress = f
		}
		m.mu.Unlock()
	}
	tc := trainConfig(req.Hyperparameters)
	tc.Base = m.base
	ad, stats, err := Train(ctx, init, samples, tc, progress)
	if err != nil {
		return nil, TrainStats{}, fmt.Errorf("train: %w", err)
	}
	return ad, stats, nil
}

// initialAdapter loads the parent adapter or makes a fresh one seeded by the
// server seed alone (the run's run.seed when a run starts the backend), and
// applies the job's LoRA settings. The job id is not mixed in: it carries
// the run's name, and a run's results must not depend on its name.
func (m *jobManager) initialAdapter(req *trainer.JobRequest) (*Adapter, error) {
	var a *Adapter
	if p := req.ParentAdapter; p != nil {
		path, err := m.parentPath(p.Path)
		if err != nil {
			return nil, fmt.Errorf("parent adapter %s: %w", p.Name, err)
		}
		parent, err := LoadAdapter(path)
		if err != nil {
			return nil, fmt.Errorf("parent adapter %s: %w", p.Name, err)
		}
		if req.LoRA.Rank != 0 && req.LoRA.Rank != parent.Rank {
			return nil, fmt.Errorf("parent adapter %s has rank %d, the job asks for lora.rank %d", p.Name, parent.Rank, req.LoRA.Rank)
		}
		if req.LoRA.Alpha != 0 {
			parent.Alpha = req.LoRA.Alpha
		}
		a = parent
	} else {
		rank := req.LoRA.Rank
		if rank == 0 {
			rank = DefaultRank
		}
		alpha := req.LoRA.Alpha
		if alpha == 0 {
			alpha = 2 * float64(rank)
		}
		fresh, err := NewAdapter(rank, alpha, m.seed)
		if err != nil {
			return nil, err
		}
		fresh.BaseCoordination = m.base.Coordination()
		a = fresh
	}
	if len(req.LoRA.TargetModules) > 0 {
		a.TargetModules = req.LoRA.TargetModules
	}
	if req.BaseModel != "" {
		a.BaseModel = req.BaseModel
	} else if a.BaseModel == "" {
		a.BaseModel = BaseModelName
	}
	return a, nil
}

// trainConfig maps the wire hyperparameters; zero values take Train's
// defaults.
func trainConfig(h trainer.Hyperparameters) TrainConfig {
	return TrainConfig{
		LearningRate: h.LearningRate,
		Epsilon:      h.Epsilon,
		EpsilonHigh:  h.EpsilonHigh,
		KLBeta:       h.KLBeta,
		Epochs:       h.Epochs,
	}
}
