package refmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/grpo-dev/grpo/trainer"
)

// maxJobBytes bounds a job request body.
const maxJobBytes = 256 << 20

// adapterNameRE is what an output adapter name may look like: it becomes a
// directory name.
var adapterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$`)

// jobError is the trainer API's error body.
type jobError struct {
	Error string `json:"error"`
}

func (b *Backend) handleCreateJob(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJobBytes))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, jobError{decodeError(err).Error()})
		return
	}
	var req trainer.JobRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, jobError{decodeError(err).Error()})
		return
	}
	if err := validateJob(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, jobError{err.Error()})
		return
	}
	if p := req.ParentAdapter; p != nil {
		if _, err := b.jobs.parentPath(p.Path); err != nil {
			writeJSON(w, http.StatusBadRequest, jobError{err.Error()})
			return
		}
	}
	job, created, err := b.jobs.create(&req, body)
	var taken *adapterTakenError
	if errors.As(err, &taken) {
		b.logger.Warn("trainer job refused", "id", req.ID, "err", err)
		writeJSON(w, http.StatusConflict, jobError{err.Error()})
		return
	}
	if err != nil {
		b.logger.Error("create trainer job", "id", req.ID, "err", err)
		writeJSON(w, http.StatusInternalServerError, jobError{err.Error()})
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(req.ID))
	code := http.StatusOK
	if created {
		code = http.StatusAccepted
	}
	writeJSON(w, code, job)
}

func (b *Backend) handleGetJob(w http.ResponseWriter, r *http.Request) {
	b.writeJob(w, b.jobs.get, r.PathValue("id"))
}

func (b *Backend) handleCancelJob(w http.ResponseWriter, r *http.Request) {
	b.writeJob(w, b.jobs.cancelJob, r.PathValue("id"))
}

func (b *Backend) writeJob(w http.ResponseWriter, f func(string) (trainer.Job, error), id string) {
	job, err := f(id)
	switch {
	case errors.Is(err, ErrJobNotFound):
		writeJSON(w, http.StatusNotFound, jobError{fmt.Sprintf("job %q not found", id)})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, jobError{err.Error()})
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

// validateJob checks what can be checked before a job is accepted; errors
// name the field. Trajectories are checked when the job runs, and a bad one
// fails the job.
func validateJob(req *trainer.JobRequest) error {
	switch {
	case req.ID == "":
		return errors.New("id: required")
	case len(req.ID) > 512 || strings.ContainsFunc(req.ID, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("id: at most 512 bytes, no control characters")
	case len(jobDirName(req.ID)) > maxJobDirName:
		// The id names the job's record directory, escaped; a longer
		// name is more than a file system takes.
		return fmt.Errorf("id: %d bytes as the name of the job's record directory (escaped: each byte other than A-Z a-z 0-9 - . _ ~ takes 3); at most %d", len(jobDirName(req.ID)), maxJobDirName)
	case len(req.Trajectories) == 0:
		return errors.New("trajectories: at least one trajectory is required")
	case !adapterNameRE.MatchString(req.OutputAdapter):
		return fmt.Errorf("output_adapter %q: want 1 to 200 of A-Z a-z 0-9 . _ -, starting with a letter or digit", req.OutputAdapter)
	case req.ParentAdapter != nil && req.ParentAdapter.Path == "":
		return errors.New("parent_adapter.path: required when parent_adapter is set")
	case req.LoRA.Rank < 0 || req.LoRA.Rank > MaxRank:
		return fmt.Errorf("lora.rank %d: accepted 1 to %d (0 for the default %d)", req.LoRA.Rank, MaxRank, DefaultRank)
	case req.LoRA.Alpha < 0 || math.IsInf(req.LoRA.Alpha, 0):
		return fmt.Errorf("lora.alpha %v: must be a positive number (0 for twice the rank)", req.LoRA.Alpha)
	}
	if err := trainConfig(req.Hyperparameters).withDefaults().validate(); err != nil {
		return fmt.Errorf("hyperparameters.%w", err)
	}
	return nil
}
