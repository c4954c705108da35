package inference

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Outcomes of an adapter load on one endpoint, the outcome label of
// grpo_inference_adapter_load_attempts_total.
const (
	LoadLoaded   = "loaded"    // the server loaded it
	LoadPresent  = "present"   // already loaded from the same path (GET /v1/models root)
	LoadReloaded = "reloaded"  // unloaded and loaded again: the server ignores load_inplace
	LoadNotFound = "not_found" // nothing at the path yet; retried with backoff
	LoadFailed   = "failed"    // any other failure
)

// FleetMetrics are the fleets' Prometheus metrics, labelled by run and
// endpoint URL. One value serves every fleet of a process; a nil
// *FleetMetrics records nothing.
type FleetMetrics struct {
	up           *prometheus.GaugeVec
	limit        *prometheus.GaugeVec
	drains       *prometheus.CounterVec
	readmissions *prometheus.CounterVec
	loads        *prometheus.CounterVec
}

// NewFleetMetrics registers the fleet metrics with reg.
func NewFleetMetrics(reg prometheus.Registerer) *FleetMetrics {
	f := promauto.With(reg)
	return &FleetMetrics{
		up: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_inference_endpoint_up", Help: "1 while the inference endpoint takes requests, 0 while it is drained.",
		}, []string{"run", "endpoint"}),
		limit: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_inference_endpoint_concurrency_limit", Help: "Requests the fleet lets in flight at the endpoint, adapted to its vLLM queue.",
		}, []string{"run", "endpoint"}),
		drains: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_inference_endpoint_drains_total", Help: "Times the endpoint was drained after failing.",
		}, []string{"run", "endpoint"}),
		readmissions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_inference_endpoint_readmissions_total", Help: "Times a drained endpoint answered again and was readmitted, its adapters loaded.",
		}, []string{"run", "endpoint"}),
		loads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_inference_adapter_load_attempts_total", Help: "Adapter loads on one endpoint, by outcome (loaded, present, reloaded, not_found, failed).",
		}, []string{"run", "endpoint", "outcome"}),
	}
}

// endpointMetrics are one endpoint's children, bound once.
type endpointMetrics struct {
	up, limit            prometheus.Gauge
	drains, readmissions prometheus.Counter
	loads                map[string]prometheus.Counter
}

func (m *FleetMetrics) endpoint(run, url string) endpointMetrics {
	if m == nil {
		return endpointMetrics{}
	}
	e := endpointMetrics{
		up: m.up.WithLabelValues(run, url), limit: m.limit.WithLabelValues(run, url),
		drains: m.drains.WithLabelValues(run, url), readmissions: m.readmissions.WithLabelValues(run, url),
		loads: map[string]prometheus.Counter{},
	}
	for _, o := range []string{LoadLoaded, LoadPresent, LoadReloaded, LoadNotFound, LoadFailed} {
		e.loads[o] = m.loads.WithLabelValues(run, url, o)
	}
	return e
}

func (e endpointMetrics) setUp(up bool) {
	if e.up != nil {
		v := 0.0
		if up {
			v = 1
		}
		e.up.Set(v)
	}
}

func (e endpointMetrics) setLimit(n int) {
	if e.limit != nil {
		e.limit.Set(float64(n))
	}
}

func (e endpointMetrics) drained() {
	if e.drains != nil {
		e.drains.Inc()
	}
}

func (e endpointMetrics) readmitted() {
	if e.readmissions != nil {
		e.readmissions.Inc()
	}
}

func (e endpointMetrics) load(outcome string) {
	if c := e.loads[outcome]; c != nil {
		c.Inc()
	}
}

// forget deletes the series of run's endpoint url: a run's fleet drops
// its endpoints' series when it closes, so that a daemon hosting many
// runs over many endpoints keeps only the series of the runs it plays.
func (m *FleetMetrics) forget(run, url string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"run": run, "endpoint": url}
	m.up.Delete(labels)
	m.limit.Delete(labels)
	m.drains.Delete(labels)
	m.readmissions.Delete(labels)
	m.loads.DeletePartialMatch(labels)
}
