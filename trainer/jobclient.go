package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/internal/quote"
)

// Defaults of JobClientOptions.
const (
	DefaultPollInterval    = 200 * time.Millisecond
	DefaultMaxPollInterval = 5 * time.Second
	DefaultRequestTimeout  = 30 * time.Second
	DefaultRetries         = 5
	DefaultMaxPollErrors   = 10
)

// JobClientOptions configure a JobClient. Zero values take the defaults.
type JobClientOptions struct {
	HTTPClient *http.Client

	// PollInterval is the first wait between polls and between retries;
	// waits double up to MaxPollInterval.
	PollInterval    time.Duration
	MaxPollInterval time.Duration

	// RequestTimeout bounds each HTTP attempt.
	RequestTimeout time.Duration

	// Retries is how many times a request that failed transiently
	// (connection refused or reset, 429, 5xx) is sent again; negative
	// disables retries.
	Retries int

	// MaxPollErrors is how many consecutive transient poll failures Wait
	// tolerates before giving up: a restarting trainer is not a failed job.
	MaxPollErrors int
}

// JobClient speaks the trainer job API (DESIGN §5). It is safe for
// concurrent use.
type JobClient struct {
	baseURL         string
	httpClient      *http.Client
	pollInterval    time.Duration
	maxPollInterval time.Duration
	requestTimeout  time.Duration
	retries         int
	maxPollErrors   int
}

// NewJobClient returns a client for the trainer at baseURL (for example
// http://127.0.0.1:7000). It does no I/O.
func NewJobClient(baseURL string, opts JobClientOptions) *JobClient {
	c := &JobClient{
		baseURL:         strings.TrimRight(baseURL, "/"),
		httpClient:      opts.HTTPClient,
		pollInterval:    opts.PollInterval,
		maxPollInterval: opts.MaxPollInterval,
		requestTimeout:  opts.RequestTimeout,
		retries:         opts.Retries,
		maxPollErrors:   opts.MaxPollErrors,
	}
	if c.httpClient == nil {
		c.httpClient = http.DefaultClient
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
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.maxPollErrors <= 0 {
		c.maxPollErrors = DefaultMaxPollErrors
	}
	return c
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
	u := c.baseURL + "/v1/jobs"
	var job Job
	err = c.retry(ctx, func(ctx context.Context) error {
		a, err := c.roundTrip(ctx, http.MethodPost, u, body)
		if err != nil {
			return err
		}
		job, err = decodeJob(http.MethodPost, a, req.ID)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("submit trainer job %s: %w", req.ID, err)
	}
	return job, nil
}

// Get returns the job's current state, retrying transient failures.
func (c *JobClient) Get(ctx context.Context, id string) (Job, error) {
	var job Job
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		job, err = c.get(ctx, id)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("get trainer job %s: %w", id, err)
	}
	return job, nil
}

// get polls the job once.
func (c *JobClient) get(ctx context.Context, id string) (Job, error) {
	a, err := c.roundTrip(ctx, http.MethodGet, c.jobURL(id), nil)
	if err != nil {
		return Job{}, err
	}
	return decodeJob(http.MethodGet, a, id)
}

// Cancel asks the trainer to cancel the job, retrying transient failures.
func (c *JobClient) Cancel(ctx context.Context, id string) error {
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.roundTrip(ctx, http.MethodDelete, c.jobURL(id), nil)
		return err
	})
	if err != nil {
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
func decodeJob(method string, a answer, wantID string) (Job, error) {
	var job Job
	if err := json.Unmarshal(a.body, &job); err != nil {
		return Job{}, fmt.Errorf("%s %s: answer is not a trainer job (%s, %v): %s",
			method, a.url, contentType(a.contentType), err, quote.Body(a.body))
	}
	switch {
	case job.ID == "" && job.State == "":
		return Job{}, fmt.Errorf("%s %s: answer has no job id or state (%s): %s",
			method, a.url, contentType(a.contentType), quote.Body(a.body))
	case job.ID != "" && job.ID != wantID:
		return Job{}, fmt.Errorf("%s %s: answer is job %q, want %q", method, a.url, job.ID, wantID)
	case !knownState(job.State):
		return Job{}, fmt.Errorf("%s %s: job %s has unknown state %q, want one of queued, running, succeeded, failed, cancelled",
			method, a.url, wantID, job.State)
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
