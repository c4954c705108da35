package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/quote"
)

// Defaults of JobClientOptions.
const (
	DefaultPollInterval    = 200 * time.Millisecond
	DefaultMaxPollInterval = 5 * time.Second
	DefaultRequestTimeout  = 30 * time.Second
	DefaultMaxPollErrors   = 10
)

// JobClientOptions configure a JobClient. Zero values take the defaults.
type JobClientOptions struct {
	HTTPClient *http.Client // default httpx.DefaultHTTPClient()

	// PollInterval is Wait's first wait between polls; waits double up to
	// MaxPollInterval, and start again from PollInterval when the job moves.
	PollInterval    time.Duration
	MaxPollInterval time.Duration

	// RequestTimeout bounds each HTTP attempt.
	RequestTimeout time.Duration

	// Retry is the retry policy of Submit, Get and Cancel (httpx.Policy:
	// Retries extra attempts after the first, 0 none) for transient
	// failures (connection refused or reset, 429, 5xx); nil takes
	// httpx.DefaultPolicy().
	Retry *httpx.Policy

	// SubmitTimeout, when positive, bounds a whole Submit: every attempt
	// and every wait between them (each attempt stays bounded by
	// RequestTimeout). A run sets it to trainer.job_timeout, so a create
	// that hangs fails within the job's own bound; 0 leaves Submit bounded
	// by the retry policy alone.
	SubmitTimeout time.Duration

	// APIKey, when set, is sent as "Authorization: Bearer ..." with
	// every request; it is never logged.
	APIKey string

	// MaxPollErrors is how many consecutive transient poll failures Wait
	// tolerates before giving up: a restarting trainer is not a failed job.
	MaxPollErrors int

	// PollOutage, when positive, is how long Wait rides out a trainer
	// that stopped answering its polls (connection refused or reset, 429,
	// 5xx): it gives up only when more than MaxPollErrors polls failed in
	// a row AND the first of them is at least PollOutage old. 0: the count
	// alone. A run sets it to inference.outage_window.
	PollOutage time.Duration
}

// JobClient speaks the trainer job API (DESIGN §5). It is safe for
// concurrent use.
type JobClient struct {
	baseURL         string
	http            *httpx.Client
	pollInterval    time.Duration
	maxPollInterval time.Duration
	requestTimeout  time.Duration
	submitTimeout   time.Duration
	maxPollErrors   int
	pollOutage      time.Duration
}

// NewJobClient returns a client for the trainer at baseURL (for example
// http://127.0.0.1:7000). It does no I/O.
func NewJobClient(baseURL string, opts JobClientOptions) *JobClient {
	c := &JobClient{
		baseURL:         strings.TrimRight(baseURL, "/"),
		pollInterval:    opts.PollInterval,
		maxPollInterval: opts.MaxPollInterval,
		requestTimeout:  opts.RequestTimeout,
		submitTimeout:   max(0, opts.SubmitTimeout),
		maxPollErrors:   opts.MaxPollErrors,
		pollOutage:      max(0, opts.PollOutage),
	}
	if c.pollInterval <= 0 {
		c.pollInterval = DefaultPollInterval
	}
	if c.maxPollInterval <= 0 {
		c.maxPollInterval = DefaultMaxPollInterval
	}
	c.maxPollInterval = max(c.maxPollInterval, c.pollInterval)
	if c.requestTimeout <= 0 {
		c.requestTimeout = DefaultRequestTimeout
	}
	if c.maxPollErrors <= 0 {
		c.maxPollErrors = DefaultMaxPollErrors
	}
	retry := httpx.DefaultPolicy()
	if opts.Retry != nil {
		retry = *opts.Retry
	}
	c.http = httpx.New(httpx.Options{HTTPClient: opts.HTTPClient, Retry: retry, Timeout: c.requestTimeout, MaxBody: maxBody, BearerToken: opts.APIKey})
	return c
}

// pollBackoff paces Wait's polls.
func (c *JobClient) pollBackoff() *httpx.Backoff {
	return httpx.Policy{BaseDelay: c.pollInterval, MaxDelay: c.maxPollInterval}.Backoff()
}

// Submit creates the job req.ID, or returns the existing job of that id: the
// create is idempotent, so transient failures are retried with backoff.
func (c *JobClient) Submit(ctx context.Context, req JobRequest) (Job, error) {
	if req.ID == "" {
		return Job{}, errors.New("submit trainer job: empty id")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Job{}, fmt.Errorf("submit trainer job %s: %w", req.ID, err)
	}
	parent := ctx
	if c.submitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.submitTimeout, ErrSubmitTimeout)
		defer cancel()
	}
	var job Job
	url := c.baseURL + "/v1/jobs"
	err = c.request(ctx, http.MethodPost, url, body, func(r *httpx.Response) error {
		var err error
		job, err = decodeJob(r, req.ID)
		return err
	})
	if err != nil {
		if parent.Err() == nil && errors.Is(context.Cause(ctx), ErrSubmitTimeout) {
			return Job{}, fmt.Errorf("submit trainer job %s: POST %s: not accepted within the job timeout %s (trainer.job_timeout, which bounds every attempt of the create; each attempt up to %s): %w: %v",
				req.ID, url, c.submitTimeout, c.requestTimeout, ErrSubmitTimeout, err)
		}
		return Job{}, fmt.Errorf("submit trainer job %s%s: %w", req.ID, sizeNote(len(body)), err)
	}
	return job, nil
}

// sizeNote says how large a job request that failed was, when that may be
// why: a trainer may cap a job's size (the embedded one at 256 MiB) and
// close the connection mid-upload, which the client sees only as a reset
// or a broken pipe.
func sizeNote(n int) string {
	if n < 1<<20 {
		return ""
	}
	return fmt.Sprintf(" (a %.0f MB request: a trainer may cap a job's size; trajectories grow with n, rounds squared and episodes)", float64(n)/1e6)
}

// get polls the job once.
func (c *JobClient) get(ctx context.Context, id string) (Job, error) {
	var job Job
	err := c.once(ctx, http.MethodGet, c.jobURL(id), func(r *httpx.Response) error {
		var err error
		job, err = decodeJob(r, id)
		return err
	})
	return job, err
}

// Cancel asks the trainer to cancel the job, retrying transient failures.
func (c *JobClient) Cancel(ctx context.Context, id string) error {
	if err := c.request(ctx, http.MethodDelete, c.jobURL(id), nil, nil); err != nil {
		return fmt.Errorf("cancel trainer job %s: %w", id, err)
	}
	return nil
}

// jobURL is /v1/jobs/{id}. The id's slashes stay raw (the API routes
// "run/step-0003" as one id); each segment is escaped.
func (c *JobClient) jobURL(id string) string {
	segs := strings.Split(id, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.baseURL + "/v1/jobs/" + strings.Join(segs, "/")
}

// decodeJob parses a job answer and checks it is one: JSON of the right
// shape, the expected id, a known state.
func decodeJob(a *httpx.Response, wantID string) (Job, error) {
	method, ct := a.Method, a.Header.Get("Content-Type")
	var job Job
	if err := json.Unmarshal(a.Body, &job); err != nil {
		return Job{}, fmt.Errorf("%s %s: answer is not a trainer job (%s, %v): %s",
			method, a.URL, contentType(ct), err, quote.Body(a.Body))
	}
	switch {
	case job.ID == "" && job.State == "":
		return Job{}, fmt.Errorf("%s %s: answer has no job id or state (%s): %s",
			method, a.URL, contentType(ct), quote.Body(a.Body))
	case job.ID != "" && job.ID != wantID:
		return Job{}, fmt.Errorf("%s %s: answer is job %q, want %q", method, a.URL, job.ID, wantID)
	case !knownState(job.State):
		return Job{}, fmt.Errorf("%s %s: job %s has unknown state %q, want one of queued, running, succeeded, failed, cancelled",
			method, a.URL, wantID, job.State)
	}
	job.ID = wantID
	return job, nil
}

func knownState(s string) bool {
	return s == StateQueued || s == StateRunning || Terminal(s)
}

func contentType(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}

// Health sends one GET /healthz, which the job API answers with 200. A run
// calls it before it spends anything on rollouts.
func (c *JobClient) Health(ctx context.Context) error {
	if err := c.once(ctx, http.MethodGet, c.baseURL+"/healthz", nil); err != nil {
		return fmt.Errorf("GET /healthz: %w", err)
	}
	return nil
}

// Trajectories are the domain's trajectories in their wire form (the
// trajectories of a JobRequest).
func Trajectories(ts []grpo.Trajectory) []Trajectory {
	if ts == nil {
		return nil
	}
	out := make([]Trajectory, len(ts))
	for i, t := range ts {
		s := t.Sampling
		out[i] = Trajectory{
			MessagesAndChoices: t.MessagesAndChoices, Tools: t.Tools,
			Reward: t.Reward, Advantage: t.Advantage, Group: t.Group, Episode: t.Episode, Agent: t.Agent,
			Sampling: &Sampling{
				Model: s.Model, Temperature: wire32(s.Temperature), TopP: wire32(s.TopP),
				MaxTokens: s.MaxTokens, ChatTemplateKwargs: s.ChatTemplateKwargs,
			},
			PolicyStep: t.PolicyStep,
		}
	}
	return out
}

// wire32 is the float64 whose shortest decimal form is the float32's, as
// encoding/json writes a float32 into a request: settings are carried at
// the precision they were sent with (0.7 stays 0.7, not 0.699999988).
func wire32(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}
