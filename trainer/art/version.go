package art

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// SupportedRange is the range of openpipe-art releases whose `art run`
// server trains what grpo sends: the releases checked against the real app
// by .ci/art.sh. Later releases are refused at start (see detect).
const SupportedRange = "0.4.0 to 0.5.0"

// Protocol is what Check learned from the server's /openapi.json. FastAPI
// reports its own default version ("0.1.0") in info.version, not ART's, so
// the release is told from the paths and schemas the server exposes.
type Protocol struct {
	// Releases names the band of releases with this shape.
	Releases string
	// Log: /_log exists (every supported release has it).
	Log bool
	// ScaleRewards: the training dev config accepts scale_rewards (0.4.4
	// on), so ART can be told not to divide by the group's reward standard
	// deviation. Those releases also divide every advantage by the batch's
	// mean |advantage| (art/local/pack.py, then art/preprocessing/pack.py).
	ScaleRewards bool
	// TrainsMessages: the tokenizer also trains the plain assistant
	// messages of a history, re-encoding their content alone (0.4.8 on,
	// told by dev_config.scale_learning_rate_by_reward_std_dev, added with
	// it). Earlier sampled turns then cannot be sent as context only, so
	// TrainGroups sends each trajectory as one history there.
	TrainsMessages bool
}

// The bands of releases detect tells apart, and why those outside
// SupportedRange are refused (what the real app does with grpo's requests).
const (
	bandOld      = "0.4.0 to 0.4.3"
	bandScale    = "0.4.4 to 0.4.7"
	bandMessages = "0.4.8 to 0.5.0"
	whyChoices   = "openpipe-art 0.5.1 to 0.5.17 (Trajectory.auto_metrics found): the app keeps each sampled choice as a chat message (SkipValidation on messages_and_choices), and its tokenizer then fails with KeyError: 'role' on every step"
	whyNoSchema  = "/openapi.json answers 500, as openpipe-art 0.5.9 and later do: those releases cannot train what grpo sends (sampled choices are taken for chat messages) and 0.5.18 no longer trains through `art run`"
)

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
// server exposes instead, and Check turns it into a *VersionError. A
// supported server has every endpoint the client uses, the 0.4 trajectory
// schema (additional_histories, absent in 0.3.11), /_log and
// /_delete_checkpoints, and no Trajectory.auto_metrics (added in 0.5.1,
// the first release whose app breaks sampled choices).
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
		{"post", "/_log"},
		{"post", "/_delete_checkpoints"},
	} {
		if !has(e.path, e.method) {
			missing = append(missing, strings.ToUpper(e.method)+" "+e.path)
		}
	}
	switch {
	case len(missing) > 0:
		found := "no " + strings.Join(missing, ", no ")
		if has("/register", "post") && !has("/_train_model", "post") {
			found += " (openpipe-art 0.5.18 and later no longer train through `art run`)"
		}
		return Protocol{}, errors.New(found + "; paths found: " + pathList(d.Paths))
	case !prop("additional_histories"):
		return Protocol{}, errors.New("trajectories without additional_histories, as in openpipe-art 0.3.x")
	case prop("auto_metrics"):
		return Protocol{}, errors.New(whyChoices)
	}
	p := Protocol{Log: true, ScaleRewards: prop("scale_rewards"), TrainsMessages: prop("scale_learning_rate_by_reward_std_dev"), Releases: bandOld}
	switch {
	case p.TrainsMessages:
		p.Releases = bandMessages
	case p.ScaleRewards:
		p.Releases = bandScale
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
