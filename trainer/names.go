package trainer

import (
	"fmt"
	"strconv"
	"strings"
)

// JobID returns the idempotency key of a run's training step, e.g.
// JobID("dp5", 3) = "dp5/step-0003". Submitting the same id twice returns the
// existing job, so a restarted orchestrator never trains a step twice.
func JobID(run string, step int) string {
	return fmt.Sprintf("%s/step-%04d", run, step)
}

// retrySuffix marks a job id as a later attempt at a step's job (RetryID).
const retrySuffix = "-retry-"

// RetryID returns the id of the next attempt at the job whose id is id:
// a step's job that ended failed or cancelled keeps its id on the trainer
// (the id is the idempotency key, never trained twice), so it is tried
// again under a new one. RetryID("dp5/step-0003") = "dp5/step-0003-retry-2",
// and RetryID of that is "dp5/step-0003-retry-3".
func RetryID(id string) string {
	if i := strings.LastIndex(id, retrySuffix); i >= 0 {
		if n, err := strconv.Atoi(id[i+len(retrySuffix):]); err == nil && n >= 2 {
			return id[:i] + retrySuffix + strconv.Itoa(n+1)
		}
	}
	return id + retrySuffix + "2"
}

// JobKey returns the run part of a run's job ids: its name and, when it
// has one, its random id, e.g. JobKey("dp5", "3f9a1c2b4d5e6f70") =
// "dp5.3f9a1c2b4d5e6f70", so that two stores' runs of the same name never
// share a job on one trainer. Runs stored without an id keep their name.
func JobKey(run, id string) string {
	if id == "" {
		return run
	}
	return run + "." + id
}

// AdapterName returns the name of the adapter a run's step produces, e.g.
// AdapterName("dp5", 3) = "dp5-step-0003". It is the name the inference
// servers load it under and the model name requests address. A run name's
// '/' separators (experiment runs, exp/arm/1) become '.', so the adapter
// name is one path segment: AdapterName("exp/arm/1", 3) = "exp.arm.1-step-0003".
func AdapterName(run string, step int) string {
	return fmt.Sprintf("%s-step-%04d", strings.ReplaceAll(run, "/", "."), step)
}
