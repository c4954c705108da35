package trainer

import (
	"fmt"
	"strings"
)

// JobID returns the idempotency key of a run's training step, e.g.
// JobID("dp5", 3) = "dp5/step-0003". Submitting the same id twice returns the
// existing job, so a restarted orchestrator never trains a step twice.
func JobID(run string, step int) string {
	return fmt.Sprintf("%s/step-%04d", run, step)
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
