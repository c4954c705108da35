package trainer

import "fmt"

// JobID returns the idempotency key of a run's training step, e.g.
// JobID("dp5", 3) = "dp5/step-0003". Submitting the same id twice returns the
// existing job, so a restarted orchestrator never trains a step twice.
func JobID(run string, step int) string {
	return fmt.Sprintf("%s/step-%04d", run, step)
}

// AdapterName returns the name of the adapter a run's step produces, e.g.
// AdapterName("dp5", 3) = "dp5-step-0003". It is the name the inference
// servers load it under and the model name requests address.
func AdapterName(run string, step int) string {
	return fmt.Sprintf("%s-step-%04d", run, step)
}
