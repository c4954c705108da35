package trainer

import (
	"errors"
	"fmt"
)

// Sentinel errors of the job API client.
var (
	// ErrJobFailed matches a *JobError for a job the trainer marked failed.
	ErrJobFailed = errors.New("trainer job failed")
	// ErrJobCancelled matches a *JobError for a job that ended cancelled.
	ErrJobCancelled = errors.New("trainer job cancelled")
	// ErrJobTimeout is wrapped by Wait when a job outlives its timeout.
	ErrJobTimeout = errors.New("trainer job timed out")
	// ErrSubmitTimeout is wrapped by Submit when the create (every
	// attempt) outlives JobClientOptions.SubmitTimeout.
	ErrSubmitTimeout = errors.New("trainer job create timed out")
	// ErrJobNotFound is wrapped when the trainer does not know a job id
	// (for example after it restarted and lost its queue): resubmit it.
	ErrJobNotFound = errors.New("trainer job not found")
)

// JobError reports a job that reached a terminal state other than
// succeeded. errors.Is(err, ErrJobFailed) or errors.Is(err, ErrJobCancelled)
// tells which.
type JobError struct {
	ID      string
	State   string
	Message string
}

// Error implements error.
func (e *JobError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("trainer job %s %s", e.ID, e.State)
	}
	return fmt.Sprintf("trainer job %s %s: %s", e.ID, e.State, e.Message)
}

// Is matches ErrJobFailed or ErrJobCancelled by the job's state.
func (e *JobError) Is(target error) bool {
	switch target {
	case ErrJobFailed:
		return e.State == StateFailed
	case ErrJobCancelled:
		return e.State == StateCancelled
	}
	return false
}
