package refmodel

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// oneTurn is a trajectory with one sampled choice of output a in state s,
// logged with the base policy's logprob.
func oneTurn(s rollout.State, a int, adv float64) trainer.Trajectory {
	return oneTurnFrom(BasePolicy(), s, a, adv)
}

// oneTurnFrom is oneTurn sampled from policy p.
func oneTurnFrom(p *Policy, s rollout.State, a int, adv float64) trainer.Trajectory {
	lp := policyLogProbs(p, s, 1, AllOutputs)[a]
	return trainer.Trajectory{
		MessagesAndChoices: []json.RawMessage{
			raw(`{"role":"system","content":"rules"}`),
			userItem(s),
			choiceItem(tokenStrings[a], lp),
		},
		Tools:     rollout.ToolsJSON(),
		Advantage: adv,
		Group:     "g0",
		Episode:   "e0",
		Agent:     s.ID,
	}
}

func jobRequest(id, out string, parent *trainer.Adapter, trajs ...trainer.Trajectory) trainer.JobRequest {
	return trainer.JobRequest{
		ID:            id,
		BaseModel:     BaseModelName,
		ParentAdapter: parent,
		OutputAdapter: out,
		LoRA:          trainer.LoRA{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}},
		Hyperparameters: trainer.Hyperparameters{
			Epsilon: 0.2, EpsilonHigh: 0.2, Epochs: 1,
		},
		Trajectories: trajs,
	}
}

func createJob(t *testing.T, url string, req any) (int, trainer.Job) {
	t.Helper()
	code, raw := do(t, http.MethodPost, url+"/v1/jobs", req)
	var j trainer.Job
	if code < 300 {
		if err := json.Unmarshal(raw, &j); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	return code, j
}

func loadServed(t *testing.T, url string, a *trainer.Adapter) {
	t.Helper()
	code, body := do(t, http.MethodPost, url+"/v1/load_lora_adapter", inference.LoadAdapterRequest{LoraName: a.Name, LoraPath: a.Path})
	if code != 200 {
		t.Fatalf("load %s: %d %s", a.Name, code, body)
	}
}

// servedLogProb is the logprob the server reports for output o in state s
// (through top_logprobs, which lists all seven).
func servedLogProb(t *testing.T, url, model string, s rollout.State, o int) float64 {
	t.Helper()
	code, resp, raw := chat(t, url, chatBody(model, s, map[string]any{"top_logprobs": NumOutputs, "seed": 1}))
	if code != 200 {
		t.Fatalf("chat: %d %s", code, raw)
	}
	for _, tl := range resp.Choices[0].LogProbs.Content[0].TopLogProbs {
		if tl.Token == tokenStrings[o] {
			return tl.LogProb
		}
	}
	t.Fatalf("no %s in top_logprobs", tokenStrings[o])
	return 0
}

// TestJobMovesServedPolicy goes through both APIs: a job trains on one
// decision, the adapter is loaded, and the served probability of that
// decision moves with the sign of its advantage.
func TestJobMovesServedPolicy(t *testing.T) {
	_, srv := mustServe(t, 1)
	for _, tc := range []struct {
		id     string
		action int
		adv    float64
	}{
		{"run/step-0001", outPutDownLeft, 1},
		{"run/step-0002", outPickUpRight, -1},
	} {
		out := strings.ReplaceAll(tc.id, "/", "-")
		code, j := createJob(t, srv.URL, jobRequest(tc.id, out, nil, oneTurn(stateWaitingRight, tc.action, tc.adv)))
		if code != http.StatusAccepted || j.ID != tc.id || j.State != trainer.StateQueued {
			t.Fatalf("create: %d %+v", code, j)
		}
		j = waitJob(t, srv.URL, tc.id)
		if j.State != trainer.StateSucceeded || j.Progress != 1 || j.Adapter == nil || j.Adapter.Name != out ||
			j.Metrics == nil || j.Metrics.GradNorm == 0 {
			t.Fatalf("job %+v", j)
		}
		loadServed(t, srv.URL, j.Adapter)
		before := servedLogProb(t, srv.URL, BaseModelName, stateWaitingRight, tc.action)
		after := servedLogProb(t, srv.URL, out, stateWaitingRight, tc.action)
		if (after-before)*tc.adv <= 0 {
			t.Fatalf("%s: logprob of %s %.4f -> %.4f with advantage %v", tc.id, OutputName(tc.action), before, after, tc.adv)
		}
	}
}

func TestJobIdempotent(t *testing.T) {
	b, srv := mustServe(t, 1)
	req := jobRequest("run/step-0003", "run-step-0003", nil, oneTurn(stateFirstRound, outThink, 1))
	code, first := createJob(t, srv.URL, req)
	if code != http.StatusAccepted {
		t.Fatalf("first create: %d", code)
	}
	req.OutputAdapter = "other"
	code, again := createJob(t, srv.URL, req)
	if code != http.StatusOK || again.ID != first.ID {
		t.Fatalf("second create: %d %+v", code, again)
	}
	j := waitJob(t, srv.URL, "run/step-0003")
	if j.State != trainer.StateSucceeded || j.Adapter.Name != "run-step-0003" || j.Adapter.Path != b.AdapterDir("run-step-0003") {
		t.Fatalf("job %+v", j)
	}
	code, again = createJob(t, srv.URL, req)
	if code != http.StatusOK || again.State != trainer.StateSucceeded {
		t.Fatalf("create after success: %d %+v", code, again)
	}
	ents, _ := os.ReadDir(filepath.Dir(b.AdapterDir("x")))
	if len(ents) != 1 {
		t.Fatalf("%d adapter dirs, want 1: the job trained twice", len(ents))
	}
	// The escaped form of the id names the same job.
	if code, _ := do(t, http.MethodGet, srv.URL+"/v1/jobs/run%2Fstep-0003", nil); code != 200 {
		t.Fatalf("GET escaped id: %d", code)
	}
	if code, _ := do(t, http.MethodGet, srv.URL+"/v1/jobs/run/step-9999", nil); code != 404 {
		t.Fatalf("GET unknown job: %d", code)
	}
}

func TestJobMalformedTrajectoryFails(t *testing.T) {
	b, srv := mustServe(t, 1)
	bad := oneTurn(stateFirstRound, outThink, 1)
	bad.MessagesAndChoices[2] = choiceItem("<tool_call>think", -0.1)
	createJob(t, srv.URL, jobRequest("run/bad", "run-bad", nil, oneTurn(stateFirstRound, outThink, 1), bad))
	j := waitJob(t, srv.URL, "run/bad")
	want := `trajectory 1, messages_and_choices[2]: logprobs token "<tool_call>think" is not of the form token_id:<n>`
	if j.State != trainer.StateFailed || j.Error != want || j.Adapter != nil {
		t.Fatalf("job %+v, want failed with error %q", j, want)
	}
	if ents, _ := os.ReadDir(filepath.Dir(b.AdapterDir("x"))); len(ents) != 0 {
		t.Fatalf("a failed job left %d entries in the adapters dir", len(ents))
	}
}

func TestJobBadParentFails(t *testing.T) {
	b, srv := mustServe(t, 1)
	parent := &trainer.Adapter{Name: "gone", Path: b.AdapterDir("gone")}
	createJob(t, srv.URL, jobRequest("j", "out", parent, oneTurn(stateFirstRound, outThink, 1)))
	j := waitJob(t, srv.URL, "j")
	if j.State != trainer.StateFailed || !strings.Contains(j.Error, "parent adapter gone") || !strings.Contains(j.Error, parent.Path) {
		t.Fatalf("job %+v", j)
	}
}

func TestJobChaining(t *testing.T) {
	_, srv := mustServe(t, 1)
	createJob(t, srv.URL, jobRequest("s1", "s1", nil, oneTurn(stateFirstRound, outThink, 1)))
	j1 := waitJob(t, srv.URL, "s1")
	// No trajectories: refused, as the Python trainer refuses it.
	if code, _ := createJob(t, srv.URL, jobRequest("s2", "s2", j1.Adapter)); code != http.StatusBadRequest {
		t.Fatalf("create a job without trajectories: %d, want 400", code)
	}
	w1, _ := os.ReadFile(filepath.Join(j1.Adapter.Path, WeightsFile))
	if len(w1) == 0 {
		t.Fatal("the parent's weights are gone")
	}
	// A step on samples from the parent starts from the parent.
	p1, _ := LoadAdapter(j1.Adapter.Path)
	createJob(t, srv.URL, jobRequest("s3", "s3", j1.Adapter, oneTurnFrom(NewPolicy(p1), stateFirstRound, outThink, 1)))
	createJob(t, srv.URL, jobRequest("s4", "s4", nil, oneTurn(stateFirstRound, outThink, 1)))
	a3, _ := LoadAdapter(waitJob(t, srv.URL, "s3").Adapter.Path)
	a4, _ := LoadAdapter(waitJob(t, srv.URL, "s4").Adapter.Path)
	x := FeaturesOf(&stateFirstRound)
	l1 := NewPolicy(p1).LogProbs(&x, 1, AllOutputs)[outThink]
	l3 := NewPolicy(a3).LogProbs(&x, 1, AllOutputs)[outThink]
	l4 := NewPolicy(a4).LogProbs(&x, 1, AllOutputs)[outThink]
	if !(l3 > l1 && l3 > l4) {
		t.Fatalf("think logprob: parent %.4f, chained %.4f, fresh %.4f; want the chained step above both", l1, l3, l4)
	}
}

func TestJobValidation(t *testing.T) {
	_, srv := mustServe(t, 1)
	ok := jobRequest("v", "v", nil, oneTurn(stateFirstRound, outThink, 1))
	for _, tc := range []struct {
		name string
		edit func(r *trainer.JobRequest)
		want string
	}{
		{"no id", func(r *trainer.JobRequest) { r.ID = "" }, "id: required"},
		{"bad adapter name", func(r *trainer.JobRequest) { r.OutputAdapter = "../escape" }, "output_adapter"},
		{"empty adapter name", func(r *trainer.JobRequest) { r.OutputAdapter = "" }, "output_adapter"},
		{"epsilon", func(r *trainer.JobRequest) { r.Hyperparameters.Epsilon = 2 }, "hyperparameters.epsilon"},
		{"learning rate", func(r *trainer.JobRequest) { r.Hyperparameters.LearningRate = -1 }, "hyperparameters.learning_rate"},
		{"rank", func(r *trainer.JobRequest) { r.LoRA.Rank = 1000 }, "lora.rank"},
		{"parent without path", func(r *trainer.JobRequest) { r.ParentAdapter = &trainer.Adapter{Name: "p"} }, "parent_adapter.path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			code, raw := do(t, http.MethodPost, srv.URL+"/v1/jobs", r)
			var e struct{ Error string }
			json.Unmarshal(raw, &e)
			if code != 400 || !strings.HasPrefix(e.Error, tc.want) {
				t.Fatalf("%d %s, want 400 with error starting %q", code, raw, tc.want)
			}
		})
	}
	if code, raw := do(t, http.MethodPost, srv.URL+"/v1/jobs", `{"id":`); code != 400 || !strings.Contains(string(raw), "malformed JSON") {
		t.Fatalf("malformed body: %d %s", code, raw)
	}
	if code, _ := do(t, http.MethodGet, srv.URL+"/healthz", nil); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
}

// TestJobRestart: finished jobs answer after a restart without training
// again; a job recorded but not run is run on the next Open, with the same
// result as an uninterrupted run; a cancelled job stays cancelled.
func TestJobRestart(t *testing.T) {
	req := jobRequest("run/step-0001", "run-step-0001", nil,
		oneTurn(stateFirstRound, outThink, 1), oneTurn(stateWaitingRight, outPutDownLeft, 0.5))

	// Uninterrupted, then restarted.
	dirA := t.TempDir()
	a := mustOpen(t, dirA, 7)
	srvA := httptest.NewServer(a.Handler())
	createJob(t, srvA.URL, req)
	done := waitJob(t, srvA.URL, req.ID)
	srvA.Close()
	a.Close()
	a2 := mustOpen(t, dirA, 7)
	srvA2 := httptest.NewServer(a2.Handler())
	defer srvA2.Close()
	code, j := createJob(t, srvA2.URL, req)
	if code != http.StatusOK || j.State != trainer.StateSucceeded || !reflect.DeepEqual(j.Metrics, done.Metrics) || *j.Adapter != *done.Adapter {
		t.Fatalf("after restart: %d %+v, want %+v", code, j, done)
	}

	// Recorded while no worker runs (the server stopped before training).
	dirB := t.TempDir()
	b := mustOpen(t, dirB, 7)
	b.Close()
	srvB := httptest.NewServer(b.Handler())
	createJob(t, srvB.URL, req)
	cancelled := jobRequest("run/step-0002", "run-step-0002", nil, oneTurn(stateFirstRound, outThink, 1))
	createJob(t, srvB.URL, cancelled)
	code, raw := do(t, http.MethodDelete, srvB.URL+"/v1/jobs/run/step-0002", nil)
	if code != 200 || !strings.Contains(string(raw), `"state":"cancelled"`) {
		t.Fatalf("DELETE: %d %s", code, raw)
	}
	if code, raw := do(t, http.MethodGet, srvB.URL+"/v1/jobs/"+req.ID, nil); code != 200 || !strings.Contains(string(raw), `"state":"queued"`) {
		t.Fatalf("job with no worker: %d %s", code, raw)
	}
	srvB.Close()

	b2 := mustOpen(t, dirB, 7)
	srvB2 := httptest.NewServer(b2.Handler())
	defer srvB2.Close()
	rerun := waitJob(t, srvB2.URL, req.ID)
	if rerun.State != trainer.StateSucceeded || !reflect.DeepEqual(rerun.Metrics, done.Metrics) {
		t.Fatalf("re-run job %+v, want metrics %+v", rerun, *done.Metrics)
	}
	wA, _ := os.ReadFile(filepath.Join(done.Adapter.Path, WeightsFile))
	wB, _ := os.ReadFile(filepath.Join(rerun.Adapter.Path, WeightsFile))
	if len(wA) == 0 || !bytes.Equal(wA, wB) {
		t.Fatal("the re-run job's adapter differs from the uninterrupted one's")
	}
	if got := waitJob(t, srvB2.URL, cancelled.ID); got.State != trainer.StateCancelled {
		t.Fatalf("cancelled job after restart: %+v", got)
	}
	if _, err := os.Stat(b2.AdapterDir("run-step-0002")); !os.IsNotExist(err) {
		t.Fatalf("cancelled job wrote its adapter: %v", err)
	}
}

// TestJobMetricsArithmetic: one on-policy sample, B = 0 at the start, so the
// first step's loss is -A and the reported loss is the mean over steps.
func TestJobMetricsArithmetic(t *testing.T) {
	_, srv := mustServe(t, 1)
	req := jobRequest("m", "m", nil, oneTurn(stateFirstRound, outThink, 1))
	req.Hyperparameters.LearningRate = 1e-12 // negligible steps: every step sees ratio 1
	createJob(t, srv.URL, req)
	j := waitJob(t, srv.URL, "m")
	if j.State != trainer.StateSucceeded || math.Abs(j.Metrics.Loss-(-1)) > 1e-9 || j.Metrics.ClipFraction != 0 || j.Metrics.KL > 1e-12 {
		t.Fatalf("metrics %+v, want loss -1, clip fraction 0, KL 0", j.Metrics)
	}
}

// TestJobFirstAdapterIgnoresID: a run's results must not depend on its
// name, and job ids carry the name. Two first jobs (no parent) that differ
// only in id train the same adapter; a server with another seed trains a
// different one.
func TestJobFirstAdapterIgnoresID(t *testing.T) {
	train := func(seed int64, id string) *Adapter {
		_, srv := mustServe(t, seed)
		out := strings.ReplaceAll(id, "/", "-")
		if code, j := createJob(t, srv.URL, jobRequest(id, out, nil, oneTurn(stateWaitingRight, outPutDownLeft, 1))); code != http.StatusAccepted {
			t.Fatalf("create %s: %d %+v", id, code, j)
		}
		j := waitJob(t, srv.URL, id)
		if j.State != trainer.StateSucceeded || j.Adapter == nil {
			t.Fatalf("job %s: %+v", id, j)
		}
		a, err := LoadAdapter(j.Adapter.Path)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := train(7, "alpha/step-0001")
	b := train(7, "a-much-longer-name/step-0001")
	if !slices.Equal(a.A, b.A) || !slices.Equal(a.B, b.B) {
		t.Fatal("same server seed, different job ids: the trained adapters differ")
	}
	c := train(8, "alpha/step-0001")
	if slices.Equal(a.A, c.A) {
		t.Fatal("server seeds 7 and 8 drew the same initial A")
	}
}

// TestJobsDirLeavesForeignDirectories: at start the trainer removes, from
// its jobs directory, the directories of creates that failed before their
// record (nothing but a request and temporary files) and leaves anything
// else alone: a nested run's data directory (with adapters/ and jobs/)
// was removed as a half-created job, its adapters lost.
func TestJobsDirLeavesForeignDirectories(t *testing.T) {
	dir := t.TempDir()
	b := mustOpen(t, dir, 7)
	b.Close()
	jobs := filepath.Join(dir, "jobs")
	mk := func(rel string, files ...string) string {
		p := filepath.Join(jobs, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(p, f), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	empty := mk("r%2Fstep-0001")
	half := mk("r%2Fstep-0002", "request.json", ".tmp-job.json-123")
	nested := mk("other-run", "note.txt")
	adapters := mk(filepath.Join("other-run", "adapters", "x-step-0001"), "weights.json")
	// A killed save's temporary adapter directory goes; saved ones stay.
	tmpAdapter := filepath.Join(dir, "adapters", ".tmp-r-step-0003-42")
	saved := filepath.Join(dir, "adapters", "r-step-0001")
	for _, d := range []string{tmpAdapter, saved} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A half-created job or a temporary being written now (another
	// process sharing the directory) is young: left alone; made old, it
	// is taken for a killed process's.
	young := mk("r%2Fstep-0009", "request.json")
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{empty, half, tmpAdapter} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	b2 := mustOpen(t, dir, 7)
	defer b2.Close()
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a job directory being created was removed: %v", err)
	}
	for _, gone := range []string{empty, half, tmpAdapter} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("half-created job directory %s still there: %v", gone, err)
		}
	}
	for _, kept := range []string{nested, filepath.Join(adapters, "weights.json"), saved} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
}

// TestJobIDsWithDots: a job id that is "." or "..", or starts with a dot,
// gets its own record directory under jobs/ ("..", escaped as a path
// segment alone, named the data directory), and is known after a restart,
// so that creating it again does not train it twice.
func TestJobIDsWithDots(t *testing.T) {
	for _, id := range []string{".", "..", ".x", "../x"} {
		t.Run(id, func(t *testing.T) {
			dir := t.TempDir()
			b := mustOpen(t, dir, 7)
			b.Close() // no worker: the job stays queued
			srv := httptest.NewServer(b.Handler())
			req := jobRequest(id, "dots", nil, oneTurn(stateFirstRound, outThink, 1))
			if code, _ := createJob(t, srv.URL, req); code != http.StatusAccepted {
				t.Fatalf("create %q: %d", id, code)
			}
			srv.Close()
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.Name() != jobFile {
					return err
				}
				if rel, _ := filepath.Rel(dir, path); filepath.Dir(filepath.Dir(rel)) != "jobs" || strings.HasPrefix(filepath.Base(filepath.Dir(rel)), ".") {
					t.Errorf("job %q recorded at %s, want jobs/<its directory>/%s", id, rel, jobFile)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			b2 := mustOpen(t, dir, 7)
			b2.Close()
			srv2 := httptest.NewServer(b2.Handler())
			defer srv2.Close()
			if code, j := createJob(t, srv2.URL, req); code != http.StatusOK || j.ID != id {
				t.Fatalf("create %q after a restart: %d %+v, want 200 with the recorded job", id, code, j)
			}
		})
	}
}

// TestJobDoesNotReplaceAnotherJobsAdapter: grpo names each step's adapter
// after its job (run/step-0001 makes run-step-0001), and a job whose
// output_adapter another job made, or is to make, or a directory no job
// made, is refused with 409 naming the adapter and that job, as the Python
// trainer does; it replaced the adapter in silence. The same job trained
// again after its record was lost replaces its own adapter (its
// AdapterJobFile says whose it is).
func TestJobDoesNotReplaceAnotherJobsAdapter(t *testing.T) {
	dir := t.TempDir()
	var logs testutil.Buffer
	var stop func()
	open := func() (*Backend, string) {
		if stop != nil {
			stop() // the trainer before this one
		}
		b, err := New(Options{DataDir: dir, Seed: 7, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Open(); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(b.Handler())
		stop = func() { srv.Close(); b.Close() }
		t.Cleanup(stop)
		return b, srv.URL
	}
	refused := func(url string, req trainer.JobRequest, want string) {
		t.Helper()
		code, raw := do(t, http.MethodPost, url+"/v1/jobs", req)
		var e jobError
		json.Unmarshal(raw, &e)
		if code != http.StatusConflict || e.Error != want {
			t.Fatalf("create %s: %d %s\nwant 409 with error %q", req.ID, code, raw, want)
		}
	}
	sample := oneTurn(stateFirstRound, outThink, 1)
	mine := jobRequest("run/step-1", "run-step-0001", nil, sample)
	other := jobRequest("other/step-0001", "run-step-0001", nil, sample)

	// No worker: a job stays queued, and its adapter name is held.
	b, url := open()
	adapter := b.AdapterDir("run-step-0001")
	b.Close()
	queued := jobRequest("run/step-0001", "run-step-0001", nil, sample)
	if code, _ := createJob(t, url, queued); code != http.StatusAccepted {
		t.Fatalf("create %s: %d", queued.ID, code)
	}
	refused(url, other, `output_adapter "run-step-0001" is taken: job "run/step-0001" (queued) is to make it; `+
		`a job does not replace another job's adapter: give this job another output_adapter`)
	// A cancelled job makes nothing: the name is free.
	if code, _ := do(t, http.MethodDelete, url+"/v1/jobs/run/step-0001", nil); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}

	_, url = open()
	if code, _ := createJob(t, url, mine); code != http.StatusAccepted {
		t.Fatalf("create %s: %d", mine.ID, code)
	}
	if j := waitJob(t, url, mine.ID); j.State != trainer.StateSucceeded || j.Adapter.Path != adapter {
		t.Fatalf("job %+v", j)
	}
	if raw, _ := os.ReadFile(filepath.Join(adapter, AdapterJobFile)); string(raw) != `{"job_id":"run/step-1"}`+"\n" {
		t.Fatalf("%s holds %q", AdapterJobFile, raw)
	}
	made, _ := os.ReadFile(filepath.Join(adapter, WeightsFile))
	refused(url, other, `output_adapter "run-step-0001" is taken: job "run/step-1" made it (`+adapter+`); `+
		`a job does not replace another job's adapter: give this job another output_adapter`)
	if code, _ := do(t, http.MethodGet, url+"/v1/jobs/other/step-0001", nil); code != http.StatusNotFound {
		t.Fatalf("the refused job is known: GET %d", code)
	}
	// The same job again is the same job.
	if code, _ := createJob(t, url, mine); code != http.StatusOK {
		t.Fatalf("create %s again: %d", mine.ID, code)
	}

	// The job records lost: the adapter's AdapterJobFile says whose it
	// is. Another job is refused; the job that made it trains again (as
	// the orchestrator resubmits a job the trainer no longer knows) and
	// replaces it with the same weights (training is deterministic).
	stop()
	if err := os.RemoveAll(filepath.Join(dir, "jobs")); err != nil {
		t.Fatal(err)
	}
	_, url = open()
	refused(url, other, `output_adapter "run-step-0001" is taken: job "run/step-1" made it (`+adapter+`); `+
		`a job does not replace another job's adapter: give this job another output_adapter`)
	if code, _ := createJob(t, url, mine); code != http.StatusAccepted {
		t.Fatalf("create %s after its record was lost: %d", mine.ID, code)
	}
	if j := waitJob(t, url, mine.ID); j.State != trainer.StateSucceeded {
		t.Fatalf("job %+v", j)
	}
	if again, _ := os.ReadFile(filepath.Join(adapter, WeightsFile)); len(made) == 0 || !bytes.Equal(again, made) {
		t.Fatal("the job trained again wrote other weights")
	}
	if want := `msg="replacing the adapter an earlier run of this job made" id=run/step-1`; !strings.Contains(logs.String(), want) {
		t.Fatalf("log lacks %s:\n%s", want, logs.String())
	}

	// A directory no job made is nobody's to replace.
	users := b.AdapterDir("users")
	if err := os.MkdirAll(users, 0o755); err != nil {
		t.Fatal(err)
	}
	refused(url, jobRequest("x/1", "users", nil, sample), `output_adapter "users" is taken: `+users+
		` exists, made by no job this trainer has a record of; a job does not replace another job's adapter: `+
		`give this job another output_adapter, or remove that directory`)
}

// TestJobSaveDoesNotReplaceAnotherJobsAdapter: an adapter that another job
// made after this job was accepted (another process sharing the data
// directory) is not replaced either: the job fails saying whose it is.
func TestJobSaveDoesNotReplaceAnotherJobsAdapter(t *testing.T) {
	dir := t.TempDir()
	b := mustOpen(t, dir, 7)
	b.Close() // no worker: the job stays queued
	srv := httptest.NewServer(b.Handler())
	req := jobRequest("x/1", "late", nil, oneTurn(stateFirstRound, outThink, 1))
	if code, _ := createJob(t, srv.URL, req); code != http.StatusAccepted {
		t.Fatalf("create: %d", code)
	}
	srv.Close()
	late := b.AdapterDir("late")
	if err := os.MkdirAll(late, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(late, AdapterJobFile), []byte(`{"job_id":"y/1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b2 := mustOpen(t, dir, 7)
	srv3 := httptest.NewServer(b2.Handler())
	defer srv3.Close()
	j := waitJob(t, srv3.URL, req.ID)
	want := `output_adapter "late" is taken: job "y/1" made it (` + late + `); ` +
		`a job does not replace another job's adapter: give this job another output_adapter`
	if j.State != trainer.StateFailed || j.Error != want || j.Adapter != nil {
		t.Fatalf("job %+v\nwant failed with error %q", j, want)
	}
	if ents, _ := os.ReadDir(late); len(ents) != 1 {
		t.Fatalf("%s holds %d entries, want its marker alone", late, len(ents))
	}
}

// TestJobReplacesTheAdapterOfACancelledOrFailedJob: a job can end
// cancelled or failed with its adapter written (the Python trainer's job
// cancelled while it saved; a save whose directory sync failed), and no
// answer of the trainer points at that adapter: another job naming it
// replaces it, which is logged. It was refused with 409 naming the
// cancelled or failed job. The job records are read back from disk (a
// restart) before the second job.
func TestJobReplacesTheAdapterOfACancelledOrFailedJob(t *testing.T) {
	for _, state := range []string{trainer.StateCancelled, trainer.StateFailed} {
		t.Run(state, func(t *testing.T) {
			dir := t.TempDir()
			sample := oneTurn(stateFirstRound, outThink, 1)
			first := jobRequest("run/step-0001", "run-step-0001", nil, sample)
			b := mustOpen(t, dir, 7)
			if state == trainer.StateCancelled {
				b.Close() // no worker: the job stays queued until cancelled
			} else {
				first.ParentAdapter = &trainer.Adapter{Name: "gone", Path: b.AdapterDir("gone")}
			}
			srv := httptest.NewServer(b.Handler())
			if code, _ := createJob(t, srv.URL, first); code != http.StatusAccepted {
				t.Fatalf("create %s: %d", first.ID, code)
			}
			if state == trainer.StateCancelled {
				if code, _ := do(t, http.MethodDelete, srv.URL+"/v1/jobs/"+first.ID, nil); code != http.StatusOK {
					t.Fatalf("DELETE: %d", code)
				}
			}
			if j := waitJob(t, srv.URL, first.ID); j.State != state {
				t.Fatalf("job %+v, want %s", j, state)
			}
			srv.Close()
			b.Close()
			// What the job left: its adapter, written before it ended.
			adapter := b.AdapterDir(first.OutputAdapter)
			left, err := NewAdapter(8, 16, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := left.save(adapter, first.ID, nil); err != nil {
				t.Fatal(err)
			}

			var logs testutil.Buffer
			b2, err := New(Options{DataDir: dir, Seed: 7, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := b2.Open(); err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			srv2 := httptest.NewServer(b2.Handler())
			defer srv2.Close()
			other := jobRequest("other/step-0001", first.OutputAdapter, nil, sample)
			if code, raw := do(t, http.MethodPost, srv2.URL+"/v1/jobs", other); code != http.StatusAccepted {
				t.Fatalf("create %s: %d %s, want 202", other.ID, code, raw)
			}
			if j := waitJob(t, srv2.URL, other.ID); j.State != trainer.StateSucceeded || j.Adapter == nil || j.Adapter.Path != adapter {
				t.Fatalf("job %+v, want succeeded with adapter %s", j, adapter)
			}
			if raw, _ := os.ReadFile(filepath.Join(adapter, AdapterJobFile)); string(raw) != `{"job_id":"other/step-0001"}`+"\n" {
				t.Fatalf("%s holds %q", AdapterJobFile, raw)
			}
			want := `msg="replacing the adapter of a job that ended cancelled or failed" id=other/step-0001 dir=` + adapter +
				` made_by=run/step-0001 made_by_state=` + state
			if !strings.Contains(logs.String(), want) {
				t.Fatalf("log lacks %s:\n%s", want, logs.String())
			}
		})
	}
}

// TestJobRefusedNamesTheJobThatMadeTheAdapter: when several jobs have
// held one adapter name (a data directory from before the refusal, or
// shared by two trainers), the 409 names the job the adapter's
// AdapterJobFile names, the one that made what is there now; it named the
// latest created succeeded job of the records, and the Python trainer the
// first it read. Without that file it names the latest created succeeded
// job, as the Python trainer now does too.
func TestJobRefusedNamesTheJobThatMadeTheAdapter(t *testing.T) {
	dir := t.TempDir()
	jobs := &jobManager{dir: filepath.Join(dir, "jobs")}
	adapters := filepath.Join(dir, "adapters")
	record := func(id, adapter string, created time.Time) {
		t.Helper()
		rec := jobRecord{
			Job:     trainer.Job{ID: id, State: trainer.StateSucceeded, Progress: 1, Adapter: &trainer.Adapter{Name: adapter, Path: filepath.Join(adapters, adapter)}},
			Created: created, Updated: created,
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(jobs.jobDir(id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(jobs.jobDir(id), jobFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Read back in the order of their directories' names (a%2F1 first),
	// created the other way round (z/1 the latest).
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	record("a/1", "x", t0)
	record("z/1", "x", t0.Add(time.Hour))
	record("a/2", "y", t0)
	record("z/2", "y", t0.Add(time.Hour))
	// x was made last by m/1, which this trainer has no record of; y was
	// made before adapters named their job.
	ad, err := NewAdapter(8, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.save(filepath.Join(adapters, "x"), "m/1", nil); err != nil {
		t.Fatal(err)
	}
	if err := ad.Save(filepath.Join(adapters, "y")); err != nil {
		t.Fatal(err)
	}

	b := mustOpen(t, dir, 7)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	for _, c := range []struct{ adapter, owner string }{{"x", "m/1"}, {"y", "z/2"}} {
		req := jobRequest("n/"+c.adapter, c.adapter, nil, oneTurn(stateFirstRound, outThink, 1))
		code, raw := do(t, http.MethodPost, srv.URL+"/v1/jobs", req)
		var e jobError
		json.Unmarshal(raw, &e)
		want := `output_adapter "` + c.adapter + `" is taken: job "` + c.owner + `" made it (` + filepath.Join(adapters, c.adapter) + `); ` +
			`a job does not replace another job's adapter: give this job another output_adapter`
		if code != http.StatusConflict || e.Error != want {
			t.Errorf("create %s: %d %s\nwant 409 with error %q", req.ID, code, raw, want)
		}
	}
}
