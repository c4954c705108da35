package trainer

import "fmt"

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
// servers load it under and the model name requests address.
func AdapterName(run string, step int) string {
	return fmt.Sprintf("%s-step-%04d", run, step)
}
