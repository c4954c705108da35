package art

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// SupportedRange is the range of openpipe-art releases whose `art run`
// server this package speaks.
const SupportedRange = "0.4.0 to 0.5.17"

// Protocol is what Check learned from the server's /openapi.json. FastAPI
// reports its own default version ("0.1.0") in info.version, not ART's, so
// the release is told from the paths and schemas the server exposes.
type Protocol struct {
	// Releases names the range of releases with this shape.
	Releases string
	// Log: /_log exists (0.4.0 to 0.5.7; removed in 0.5.9).
	Log bool
	// KeepSteps: checkpoints are deleted by /_delete_checkpoint_files with
	// an explicit steps_to_keep list (0.5.9 on). Before, /_delete_checkpoints
	// keeps only the latest step and the best one by a logged metric.
	KeepSteps bool
	// ScaleRewards: the training dev config accepts scale_rewards, so ART
	// can be told not to divide by the group's reward standard deviation
	// (present in 0.4.12, absent in 0.4.0).
	ScaleRewards bool
	// StepNames: ART's vLLM serves each checkpoint as "<name>@<step>"
	// (0.5.9 on); before, one adapter named "<name>" is replaced in place.
	StepNames bool
}

// openAPI is the part of an OpenAPI document that detection reads.
type openAPI struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

// detect reads an /openapi.json document; its error describes what the
// server exposes instead, and Check turns it into a *VersionError. A supported server has every
// endpoint the client uses, the 0.4 trajectory schema (additional_histories,
// absent in 0.3.11) and one of the two checkpoint deletion endpoints.
func detect(doc []byte) (Protocol, error) {
	var d openAPI
	if err := json.Unmarshal(doc, &d); err != nil {
		return Protocol{}, fmt.Errorf("/openapi.json is not an OpenAPI document (%v)", err)
	}
	has := func(path, method string) bool {
		_, ok := d.Paths[path][method]
		return ok
	}
	prop := func(name string) bool {
		for _, s := range d.Components.Schemas {
			if _, ok := s.Properties[name]; ok {
				return true
			}
		}
		return false
	}
	var missing []string
	for _, e := range []struct{ method, path string }{
		{"get", "/healthcheck"},
		{"post", "/register"},
		{"post", "/_prepare_backend_for_training"},
		{"post", "/_get_step"},
		{"post", "/_train_model"},
	} {
		if !has(e.path, e.method) {
			missing = append(missing, strings.ToUpper(e.method)+" "+e.path)
		}
	}
	if len(missing) > 0 {
		found := "no " + strings.Join(missing, ", no ")
		if has("/register", "post") && !has("/_train_model", "post") {
			found += " (releases after 0.5.17 no longer train through `art run`)"
		}
		return Protocol{}, errors.New(found + "; paths found: " + pathList(d.Paths))
	}
	if !prop("additional_histories") {
		return Protocol{}, errors.New("trajectories without additional_histories, as in openpipe-art 0.3.x")
	}
	p := Protocol{
		Log:          has("/_log", "post"),
		KeepSteps:    has("/_delete_checkpoint_files", "post"),
		ScaleRewards: prop("scale_rewards"),
	}
	oldDelete := has("/_delete_checkpoints", "post")
	switch {
	case p.KeepSteps && !p.Log:
		p.Releases, p.StepNames = "0.5.9 to 0.5.17", true
	case oldDelete && p.Log && !p.KeepSteps:
		p.Releases = "0.4.0 to 0.5.7"
	default:
		return Protocol{}, fmt.Errorf("an unknown mix of endpoints (/_log %v, /_delete_checkpoints %v, /_delete_checkpoint_files %v)", p.Log, oldDelete, p.KeepSteps)
	}
	return p, nil
}

func pathList(paths map[string]map[string]json.RawMessage) string {
	if len(paths) == 0 {
		return "none"
	}
	l := make([]string, 0, len(paths))
	for p := range paths {
		l = append(l, p)
	}
	sort.Strings(l)
	if len(l) > 12 {
		l = append(l[:12], fmt.Sprintf("and %d more", len(paths)-12))
	}
	return strings.Join(l, " ")
}
